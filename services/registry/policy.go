package registry

import (
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
)

// Policy is who may call each registry RPC when the registry has
// --auth-token-file (admin may call all of them). Workers own leases and what
// is tied to them; routers and frontends only read the worker set. The lease
// RPCs also need the lease's own token (see leaseauth.go), so that one worker
// cannot end or extend another's lease.
var Policy = grpcserver.Policy{
	registryv1.RegistryService_GrantLease_FullMethodName:    {worker},
	registryv1.RegistryService_Register_FullMethodName:      {worker},
	registryv1.RegistryService_KeepAlive_FullMethodName:     {worker},
	registryv1.RegistryService_Deregister_FullMethodName:    {worker},
	registryv1.RegistryService_RegisterModel_FullMethodName: {worker},

	registryv1.RegistryService_ListInstances_FullMethodName:  readers,
	registryv1.RegistryService_WatchInstances_FullMethodName: readers,
	registryv1.RegistryService_ListModels_FullMethodName:     readers,
	registryv1.RegistryService_WatchModels_FullMethodName:    readers,

	// Buckets and locks are the components' shared state: workers and
	// routers write it, everyone reads it.
	registryv1.RegistryService_CreateBucket_FullMethodName:     writers,
	registryv1.RegistryService_GetKey_FullMethodName:           readers,
	registryv1.RegistryService_PutKey_FullMethodName:           writers,
	registryv1.RegistryService_CreateKey_FullMethodName:        writers,
	registryv1.RegistryService_DeleteKey_FullMethodName:        writers,
	registryv1.RegistryService_ListKeys_FullMethodName:         readers,
	registryv1.RegistryService_WatchKeys_FullMethodName:        readers,
	registryv1.RegistryService_AcquireWriteLock_FullMethodName: writers,
	registryv1.RegistryService_AcquireReadLock_FullMethodName:  writers,
	registryv1.RegistryService_ReleaseLock_FullMethodName:      writers,
}

const worker = authtoken.RoleWorker

var (
	readers = []authtoken.Role{authtoken.RoleWorker, authtoken.RoleRouter, authtoken.RoleFrontend}
	writers = []authtoken.Role{authtoken.RoleWorker, authtoken.RoleRouter}
)
