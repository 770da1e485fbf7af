package eventbus

import (
	eventbusv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/eventbus/v1"
	"github.com/switchyard-llm/switchyard/pkg/authtoken"
	"github.com/switchyard-llm/switchyard/pkg/grpcserver"
)

// Policy is who may call each eventbus RPC when the eventbus has
// --auth-token-file (admin may call all of them). Workers publish their KV
// events and load and upload tokenizer files; routers publish replica sync
// and snapshots and consume; frontends consume and read objects. Deleting
// consumers and objects is admin's.
var Policy = grpcserver.Policy{
	eventbusv1.EventBusService_Publish_FullMethodName:        publishers,
	eventbusv1.EventBusService_PublishStream_FullMethodName:  publishers,
	eventbusv1.EventBusService_Subscribe_FullMethodName:      consumers,
	eventbusv1.EventBusService_Ack_FullMethodName:            consumers,
	eventbusv1.EventBusService_GetStreamInfo_FullMethodName:  everyone,
	eventbusv1.EventBusService_PutObject_FullMethodName:      publishers,
	eventbusv1.EventBusService_GetObject_FullMethodName:      everyone,
	eventbusv1.EventBusService_ListObjects_FullMethodName:    everyone,
	eventbusv1.EventBusService_DeleteConsumer_FullMethodName: nil,
	eventbusv1.EventBusService_DeleteObject_FullMethodName:   nil,
}

var (
	publishers = []authtoken.Role{authtoken.RoleWorker, authtoken.RoleRouter}
	consumers  = []authtoken.Role{authtoken.RoleRouter, authtoken.RoleFrontend}
	everyone   = []authtoken.Role{authtoken.RoleWorker, authtoken.RoleRouter, authtoken.RoleFrontend}
)
