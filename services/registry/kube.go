package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	commonv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/common/v1"
	registryv1 "github.com/switchyard-llm/switchyard/gen/go/switchyard/registry/v1"
	"github.com/switchyard-llm/switchyard/pkg/wire"
)

// KubeOptions configure a KubeBackend.
type KubeOptions struct {
	// Namespace is where the worker pods, their DynamoWorkerMetadata
	// resources and EndpointSlices live; the registry's Role covers it.
	Namespace string
	// EndpointSliceSelector is a label selector: only EndpointSlices that
	// match it decide readiness. Empty takes every slice of the namespace.
	EndpointSliceSelector string
	// Debounce is how long the join waits after a change before it
	// recomputes, so that a burst of changes becomes one batch of events.
	Debounce time.Duration
	// SyncTimeout bounds the wait for the first list of both resources.
	SyncTimeout time.Duration
	// Log receives the backend's warnings; nil discards.
	Log *slog.Logger
}

// KubeBackend is the registry's state on Kubernetes, with no etcd of its
// own: a DynamoWorkerMetadata resource per worker pod (owned by the pod, so
// garbage-collected with it) holds the pod's endpoints and model cards, and
// EndpointSlices say which pods are ready. Watches serve the join of both,
// debounced, numbered by a registry-local revision counter.
//
// A "lease" here is the pod's resource: its id derives from the pod UID,
// keep-alives find it while the resource exists, Deregister deletes it.
// Buckets and locks are ErrUnimplemented.
type KubeBackend struct {
	dyn    dynamic.Interface
	kube   kubernetes.Interface
	opts   KubeOptions
	log    *slog.Logger
	crs    cache.SharedIndexInformer
	slices cache.SharedIndexInformer

	dynFactory  dynamicinformer.DynamicSharedInformerFactory
	kubeFactory informers.SharedInformerFactory
	stop        chan struct{}
	wg          sync.WaitGroup
	dirty       chan struct{}
	closeOnce   sync.Once

	feed *kubeFeed

	// gone holds the UIDs of resources this replica deleted that its
	// informer may still hold, so that a keep-alive right after Deregister
	// is not found, as on etcd. An informer delete event clears the entry.
	goneMu sync.Mutex
	gone   map[types.UID]struct{}
}

var _ Backend = (*KubeBackend)(nil)

const instanceIDIndex = "instance-id"

// NewKubeBackend starts informers on the DynamoWorkerMetadata resources the
// registry manages and on the namespace's EndpointSlices, waits for their
// first list, and computes the initial view. Close stops them.
func NewKubeBackend(ctx context.Context, dyn dynamic.Interface, kube kubernetes.Interface, opts KubeOptions) (*KubeBackend, error) {
	if opts.Namespace == "" {
		return nil, errors.New("kubernetes backend: no namespace")
	}
	if _, err := labels.Parse(opts.EndpointSliceSelector); err != nil {
		return nil, fmt.Errorf("kubernetes backend: endpoint slice selector %q: %w", opts.EndpointSliceSelector, err)
	}
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = 30 * time.Second
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &KubeBackend{dyn: dyn, kube: kube, opts: opts, log: log, stop: make(chan struct{}), dirty: make(chan struct{}, 1), feed: newKubeFeed(), gone: map[types.UID]struct{}{}}

	k.dynFactory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, opts.Namespace, func(o *metav1.ListOptions) {
		o.LabelSelector = labelManagedBy + "=" + kubeFieldManager
	})
	k.crs = k.dynFactory.ForResource(WorkerMetadataGVR).Informer()
	if err := k.crs.AddIndexers(cache.Indexers{instanceIDIndex: func(obj any) ([]string, error) {
		if m, err := metaOf(obj); err == nil {
			if v := m.GetLabels()[labelInstanceID]; v != "" {
				return []string{v}, nil
			}
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	k.kubeFactory = informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(opts.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = opts.EndpointSliceSelector }))
	k.slices = k.kubeFactory.Discovery().V1().EndpointSlices().Informer()
	poke := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.poke() },
		UpdateFunc: func(any, any) { k.poke() },
		DeleteFunc: func(any) { k.poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{k.crs, k.slices} {
		if _, err := inf.AddEventHandler(poke); err != nil {
			return nil, fmt.Errorf("kubernetes backend: %w", err)
		}
	}
	if _, err := k.crs.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if m, err := metaOf(obj); err == nil {
			k.goneMu.Lock()
			delete(k.gone, m.GetUID())
			k.goneMu.Unlock()
		}
	}}); err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	k.dynFactory.Start(k.stop)
	k.kubeFactory.Start(k.stop)

	syncCtx, cancel := context.WithTimeout(ctx, opts.SyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), k.crs.HasSynced, k.slices.HasSynced) {
		k.Close()
		return nil, fmt.Errorf("kubernetes backend: %w: could not list %s and EndpointSlices in namespace %q within %v: is the CRD (deploy/kubernetes/crd.yaml) installed and the RBAC (deploy/kubernetes/rbac.yaml) applied?",
			ErrUnavailable, WorkerMetadataGVR.GroupResource(), opts.Namespace, opts.SyncTimeout)
	}
	k.feed.publish(k.compute())
	k.log.Info("kubernetes discovery backend synced", "namespace", opts.Namespace,
		"worker_resources", len(k.crs.GetStore().ListKeys()), "endpointslices", len(k.slices.GetStore().ListKeys()),
		"endpointslice_selector", opts.EndpointSliceSelector)
	k.wg.Add(1)
	go k.run()
	return k, nil
}

func metaOf(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not an object", obj)
	}
	return m, nil
}

// Close stops the informers and the join, and waits for them.
func (k *KubeBackend) Close() {
	k.closeOnce.Do(func() {
		close(k.stop)
		k.wg.Wait()
		k.dynFactory.Shutdown()
		k.kubeFactory.Shutdown()
	})
}

func (k *KubeBackend) poke() {
	select {
	case k.dirty <- struct{}{}:
	default:
	}
}

// run recomputes the join after each change, once per debounce period.
func (k *KubeBackend) run() {
	defer k.wg.Done()
	t := time.NewTimer(0)
	<-t.C
	for {
		select {
		case <-k.stop:
			return
		case <-k.dirty:
		}
		t.Reset(k.opts.Debounce)
		select {
		case <-k.stop:
			t.Stop()
			return
		case <-t.C:
		}
		k.feed.publish(k.compute())
	}
}

// compute joins the informers' current contents.
func (k *KubeBackend) compute() joinState {
	var crs []*unstructured.Unstructured
	for _, o := range k.crs.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			crs = append(crs, u)
		}
	}
	var slices []*discoveryv1.EndpointSlice
	for _, o := range k.slices.GetStore().List() {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			slices = append(slices, s)
		}
	}
	return join(crs, readyPodsOf(slices))
}

// kubeErr maps Kubernetes API errors to the registry's sentinels.
func kubeErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %w: %v", op, ErrNotFound, err)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%s: %w: %v", op, ErrExists, err)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%s: %w: %v", op, ErrConflict, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%s: %w: %v", op, ErrInvalid, err)
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s: the registry's service account may not do this (see deploy/kubernetes/rbac.yaml): %w", op, err)
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err),
		apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err):
		return fmt.Errorf("%s: %w: %v", op, ErrUnavailable, err)
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		// Not an answer from the API server: it could not be reached.
		return fmt.Errorf("%s: %w: %v", op, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (k *KubeBackend) resource() dynamic.ResourceInterface {
	return k.dyn.Resource(WorkerMetadataGVR).Namespace(k.opts.Namespace)
}

// GrantLease starts a fresh registration for the worker in pod: it checks
// the pod exists with that UID, deletes what an earlier process of the pod
// (a restarted container) or an earlier pod of that name left, and applies
// the pod's DynamoWorkerMetadata with an owner reference to the pod. The
// lease id is the pod's instance id.
func (k *KubeBackend) GrantLease(ctx context.Context, ttl time.Duration, pod *registryv1.KubernetesPod, tokenDigest string) (uint64, time.Duration, error) {
	return k.claim(ctx, "grant lease", ttl, pod, true, tokenDigest)
}

// annotationLeaseToken holds the hex SHA-256 of the lease's token on the
// pod's resource. Each claim of the pod's resource (a GrantLease, or a
// Register without lease) issues a new token, and the earlier ones stop
// working: a pod has one lease.
const annotationLeaseToken = kubeGroup + "/lease-token-sha256"

// LeaseTokenDigest reads the digest from the lease's resource, found by
// the informer's cache but read from the API: a new claim replaces the
// digest, and the cache may not have seen it yet. Lease checks are rare (a
// KeepAlive stream checks once), so the extra read is cheap.
func (k *KubeBackend) LeaseTokenDigest(ctx context.Context, lease uint64) (string, error) {
	u, err := k.lookup(ctx, lease)
	if err != nil {
		return "", err
	}
	cur, err := k.resource().Get(ctx, u.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("%w: lease %x: its %s is gone", ErrLeaseNotFound, lease, kubeKind)
	}
	if err != nil {
		return "", kubeErr("read lease token", err)
	}
	if cur.GetLabels()[labelInstanceID] != idLabel(lease) || cur.GetDeletionTimestamp() != nil {
		return "", fmt.Errorf("%w: lease %x ended", ErrLeaseNotFound, lease)
	}
	return cur.GetAnnotations()[annotationLeaseToken], nil
}

// claim makes sure the pod's resource exists and is the pod's. fresh drops
// the entries of an existing resource of the same pod; otherwise only a
// resource left by an earlier pod of the same name is replaced.
func (k *KubeBackend) claim(ctx context.Context, op string, ttl time.Duration, pod *registryv1.KubernetesPod, fresh bool, tokenDigest string) (uint64, time.Duration, error) {
	if pod == nil {
		return 0, 0, fmt.Errorf("%w: the kubernetes discovery backend needs the worker's pod: set POD_NAME, POD_NAMESPACE and POD_UID (or the request's pod field)", ErrInvalid)
	}
	if pod.Namespace != k.opts.Namespace {
		return 0, 0, fmt.Errorf("%w: pod namespace %q is not the registry's namespace %q", ErrInvalid, pod.Namespace, k.opts.Namespace)
	}
	p, err := k.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return 0, 0, kubeErr(op+": get pod "+pod.Namespace+"/"+pod.Name, err)
	}
	if string(p.UID) != pod.Uid {
		return 0, 0, fmt.Errorf("%s: %w: pod %s/%s has uid %s, not %s", op, ErrNotFound, pod.Namespace, pod.Name, p.UID, pod.Uid)
	}
	role, err := podRole(p.Labels)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: pod %s/%s: %w", op, pod.Namespace, pod.Name, err)
	}
	drop := fresh
	if !fresh {
		cur, err := k.resource().Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return 0, 0, kubeErr(op, err)
		default:
			spec, _ := specOf(cur)
			drop = spec.PodUID != pod.Uid || cur.GetDeletionTimestamp() != nil
		}
	}
	if drop {
		if err := k.deleteResource(ctx, pod.Name, ""); err != nil {
			return 0, 0, kubeErr(op+": delete previous registration", err)
		}
	}
	id := kubeInstanceID(pod.Uid)
	obj := k.applyObject(pod.Name, "")
	obj.SetLabels(map[string]string{labelManagedBy: kubeFieldManager, labelInstanceID: idLabel(id)})
	obj.SetOwnerReferences([]metav1.OwnerReference{podRef(p)})
	obj.SetAnnotations(map[string]string{annotationLeaseToken: tokenDigest})
	spec := map[string]any{
		"podName":    p.Name,
		"podUID":     string(p.UID),
		"instanceID": idLabel(id),
		"ttlSeconds": int64(ttl / time.Second),
	}
	if role != commonv1.Role_ROLE_UNSPECIFIED {
		spec["role"] = roleValue(role)
	}
	obj.Object["spec"] = spec
	if _, err := k.resource().Apply(ctx, pod.Name, obj, metav1.ApplyOptions{FieldManager: kubeFieldManager, Force: true}); err != nil {
		return 0, 0, kubeErr(op+": apply "+kubeKind, err)
	}
	return id, ttl, nil
}

// applyObject is the skeleton of an apply configuration; a non-empty
// resourceVersion makes the apply conditional on it.
func (k *KubeBackend) applyObject(name, resourceVersion string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(kubeGroup + "/" + kubeVersion)
	u.SetKind(kubeKind)
	u.SetName(name)
	u.SetNamespace(k.opts.Namespace)
	if resourceVersion != "" {
		u.SetResourceVersion(resourceVersion)
	}
	return u
}

// lookup finds the resource of a lease: in the informer's cache, else (a
// resource this replica has not seen yet) by label from the API.
func (k *KubeBackend) lookup(ctx context.Context, lease uint64) (*unstructured.Unstructured, error) {
	objs, err := k.crs.GetIndexer().ByIndex(instanceIDIndex, idLabel(lease))
	if err == nil {
		for _, o := range objs {
			if u, ok := o.(*unstructured.Unstructured); ok && u.GetDeletionTimestamp() == nil && !k.isGone(u.GetUID()) {
				return u, nil
			}
		}
	}
	list, err := k.resource().List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + kubeFieldManager + "," + labelInstanceID + "=" + idLabel(lease)})
	if err != nil {
		return nil, kubeErr("find lease", err)
	}
	for i := range list.Items {
		if list.Items[i].GetDeletionTimestamp() == nil {
			return &list.Items[i], nil
		}
	}
	return nil, fmt.Errorf("%w: lease %x: no %s for it in namespace %q (the pod is gone or deregistered)", ErrLeaseNotFound, lease, kubeKind, k.opts.Namespace)
}

// entryManager is the field manager of one endpoint or model entry.
func entryManager(kind, namespace, component, endpoint string) string {
	h := fnv.New64a()
	h.Write([]byte(namespace + "/" + component + "/" + endpoint))
	return kubeFieldManager + "-" + kind + "-" + strconv.FormatUint(h.Sum64(), 16)
}

// applyEntry adds one entry to a lease's resource under its own field
// manager, conditional on the resource version it read, retrying when the
// resource changed in between. exists reports an entry that must not be
// overwritten (ErrExists).
func (k *KubeBackend) applyEntry(ctx context.Context, op string, lease uint64, manager, field string, entry any, exists func(workerSpec) error) error {
	for attempt := 0; ; attempt++ {
		u, err := k.lookup(ctx, lease)
		if err != nil {
			return err
		}
		cur, err := k.resource().Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return kubeErr(op, err)
		}
		if cur.GetLabels()[labelInstanceID] != idLabel(lease) {
			return fmt.Errorf("%s: %w: lease %x ended", op, ErrLeaseNotFound, lease)
		}
		spec, err := specOf(cur)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		if exists != nil {
			if err := exists(spec); err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
		}
		item, err := toUnstructuredValue(entry)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		obj := k.applyObject(cur.GetName(), cur.GetResourceVersion())
		obj.Object["spec"] = map[string]any{field: []any{item}}
		_, err = k.resource().Apply(ctx, cur.GetName(), obj, metav1.ApplyOptions{FieldManager: manager, Force: true})
		if apierrors.IsConflict(err) && attempt < 10 {
			continue // someone else wrote the resource since we read it
		}
		return kubeErr(op, err)
	}
}

// Register adds an endpoint to the lease's resource; the same endpoint twice
// is ErrExists. With lease 0 the registration is the pod's: it joins the
// pod's resource (made if missing) beside its other endpoints and replaces
// an earlier registration of the same endpoint by this pod, since on
// Kubernetes a new lease of a pod is the same instance.
func (k *KubeBackend) Register(ctx context.Context, in *registryv1.Instance, ttl time.Duration, lease uint64, pod *registryv1.KubernetesPod, tokenDigest string) (*registryv1.RegisterResponse, error) {
	// An instance may not register a role other than its pod's label.
	sameRole := func(s workerSpec) error {
		label, err := parseRoleValue(s.Role)
		if err != nil || label == commonv1.Role_ROLE_UNSPECIFIED || in.Role == commonv1.Role_ROLE_UNSPECIFIED {
			return nil
		}
		if wire.EffectiveRole(in.Role) != label {
			return fmt.Errorf("%w: the instance registers role %s but its pod's label %s is %s", ErrInvalid, wire.RoleName(in.Role), LabelRole, s.Role)
		}
		return nil
	}
	exists := func(s workerSpec) error {
		if err := sameRole(s); err != nil {
			return err
		}
		for _, e := range s.Endpoints {
			if e.Namespace == in.Namespace && e.Component == in.Component && e.Endpoint == in.Endpoint {
				return fmt.Errorf("%w: %s is already registered", ErrExists, instanceKey(in.Namespace, in.Component, in.Endpoint, lease))
			}
		}
		return nil
	}
	if lease == 0 {
		id, granted, err := k.claim(ctx, "register", ttl, pod, false, tokenDigest)
		if err != nil {
			return nil, err
		}
		lease, ttl, exists = id, granted, sameRole
	} else {
		u, err := k.lookup(ctx, lease)
		if err != nil {
			return nil, fmt.Errorf("register: %w", err)
		}
		spec, _ := specOf(u)
		ttl = time.Duration(spec.TTLSeconds) * time.Second
	}
	in.InstanceId = lease
	err := k.applyEntry(ctx, "register", lease, entryManager("e", in.Namespace, in.Component, in.Endpoint), "endpoints", toEndpointEntry(in), exists)
	if err != nil {
		return nil, err
	}
	return &registryv1.RegisterResponse{InstanceId: lease, TtlSeconds: int64(ttl / time.Second), Revision: k.feed.revision()}, nil
}

// KeepAlive answers found while the lease's resource exists; the pod's
// lifetime, not a timer, ends it.
func (k *KubeBackend) KeepAlive(ctx context.Context, lease uint64) (time.Duration, bool, error) {
	u, err := k.lookup(ctx, lease)
	if errors.Is(err, ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	spec, err := specOf(u)
	if err != nil || spec.TTLSeconds <= 0 {
		return DefaultTTL, true, nil
	}
	return time.Duration(spec.TTLSeconds) * time.Second, true, nil
}

// Deregister deletes the lease's resource, and with it every endpoint and
// model card of the worker.
func (k *KubeBackend) Deregister(ctx context.Context, lease uint64) (int64, error) {
	u, err := k.lookup(ctx, lease)
	if err != nil {
		return 0, fmt.Errorf("deregister: %w", err)
	}
	if err := k.deleteResource(ctx, u.GetName(), u.GetUID()); err != nil {
		return 0, kubeErr("deregister", err)
	}
	return k.feed.revision(), nil
}

// deleteResource deletes a worker resource (only the one of that UID when
// uid is set) and remembers it as gone until the informer sees the delete.
// A resource that is already gone is no error.
func (k *KubeBackend) deleteResource(ctx context.Context, name string, uid types.UID) error {
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	if uid == "" {
		cur, err := k.resource().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		uid = cur.GetUID()
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := k.resource().Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// The informer updates its store before it calls the delete handler, so
	// an object its store no longer holds needs no entry; under goneMu the
	// handler cannot run between the check and the write.
	k.goneMu.Lock()
	defer k.goneMu.Unlock()
	if o, ok, _ := k.crs.GetStore().GetByKey(k.opts.Namespace + "/" + name); ok {
		if m, err := metaOf(o); err == nil && m.GetUID() == uid {
			k.gone[uid] = struct{}{}
		}
	}
	return nil
}

func (k *KubeBackend) isGone(uid types.UID) bool {
	k.goneMu.Lock()
	defer k.goneMu.Unlock()
	_, ok := k.gone[uid]
	return ok
}

// RegisterModel adds or replaces a model card on the lease's resource.
func (k *KubeBackend) RegisterModel(ctx context.Context, c *registryv1.ModelCard, lease uint64) (int64, error) {
	c.InstanceId = lease
	if err := k.applyEntry(ctx, "register model", lease, entryManager("m", c.Namespace, c.Component, c.Endpoint), "models", toModelEntry(c), nil); err != nil {
		return 0, err
	}
	return k.feed.revision(), nil
}

// ListInstances returns the ready instances that match f.
func (k *KubeBackend) ListInstances(_ context.Context, f *registryv1.InstanceFilter) ([]*registryv1.Instance, int64, error) {
	st, rev := k.feed.current()
	return sortedValues(st.instances, func(in *registryv1.Instance) bool { return matchInstance(f, in) }), rev, nil
}

// ListModels returns the model cards of ready instances that match f.
func (k *KubeBackend) ListModels(_ context.Context, f *registryv1.ModelFilter) ([]*registryv1.ModelCard, int64, error) {
	st, rev := k.feed.current()
	return sortedValues(st.models, func(c *registryv1.ModelCard) bool { return matchModel(f, c) }), rev, nil
}

func errKubeUnimplemented(what string) error {
	return fmt.Errorf("%w: %s are not available on the kubernetes discovery backend (DYN_DISCOVERY_BACKEND=kubernetes); run the registry on etcd (kv_store) for them", ErrUnimplemented, what)
}

// CreateBucket is ErrUnimplemented on Kubernetes.
func (k *KubeBackend) CreateBucket(context.Context, string) (bool, error) {
	return false, errKubeUnimplemented("key-value buckets")
}

// GetKey is ErrUnimplemented on Kubernetes.
func (k *KubeBackend) GetKey(context.Context, string, string) (*registryv1.KeyValue, error) {
	return nil, errKubeUnimplemented("key-value buckets")
}

// PutKey is ErrUnimplemented on Kubernetes.
func (k *KubeBackend) PutKey(context.Context, string, string, []byte, uint64, *int64) (int64, error) {
	return 0, errKubeUnimplemented("key-value buckets")
}

// CreateKey is ErrUnimplemented on Kubernetes.
func (k *KubeBackend) CreateKey(context.Context, string, string, []byte, uint64) (int64, error) {
	return 0, errKubeUnimplemented("key-value buckets")
}

// DeleteKey is ErrUnimplemented on Kubernetes.
func (k *KubeBackend) DeleteKey(context.Context, string, string) (bool, int64, error) {
	return false, 0, errKubeUnimplemented("key-value buckets")
}

// ListKeys is ErrUnimplemented on Kubernetes.
func (k *KubeBackend) ListKeys(context.Context, string, string) ([]*registryv1.KeyValue, int64, error) {
	return nil, 0, errKubeUnimplemented("key-value buckets")
}

// WatchKeys is ErrUnimplemented on Kubernetes.
func (k *KubeBackend) WatchKeys(context.Context, string, string, int64, <-chan struct{}, func(*registryv1.WatchKeysResponse) error) error {
	return errKubeUnimplemented("key-value buckets")
}

// AcquireWriteLock is ErrUnimplemented on Kubernetes.
func (k *KubeBackend) AcquireWriteLock(context.Context, string, uint64) (string, bool, error) {
	return "", false, errKubeUnimplemented("distributed locks")
}

// AcquireReadLock is ErrUnimplemented on Kubernetes.
func (k *KubeBackend) AcquireReadLock(context.Context, string, uint64, time.Duration) (string, error) {
	return "", errKubeUnimplemented("distributed locks")
}

// ReleaseLock is ErrUnimplemented on Kubernetes.
func (k *KubeBackend) ReleaseLock(context.Context, string) (bool, error) {
	return false, errKubeUnimplemented("distributed locks")
}

// podRef is the owner reference a worker resource carries: the garbage
// collector deletes the resource when the pod goes.
func podRef(p *corev1.Pod) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID}
}

// toUnstructuredValue turns a JSON-tagged struct into the maps and slices of
// an unstructured object.
func toUnstructuredValue(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(b, &out)
}
