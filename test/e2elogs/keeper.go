package e2elogs

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// gone is how long a deleted pod's streams may still read.
const gone = 2 * time.Second

// Keeper streams the log of every container of the pods in one namespace
// into a file of its own, <dir>/<pod>_<container>.log, from the container's
// first start until the pod is deleted; a restarted container's lines go on
// in the same file.
type Keeper struct {
	dir    string
	cs     kubernetes.Interface
	ns     string
	retry  time.Duration
	open   func(pod, container string) Opener
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	follows map[types.UID]map[string]context.CancelFunc // by pod and container
	wg      sync.WaitGroup
}

// Start starts keeping the logs of namespace ns's pods in dir. Stop ends it.
func Start(ctx context.Context, cs kubernetes.Interface, ns, dir string) (*Keeper, error) {
	return start(ctx, cs, ns, dir, nil, time.Second)
}

// start is Start with another way to open a container's log (nil: the API
// server's) and the wait before a log is opened again.
func start(ctx context.Context, cs kubernetes.Interface, ns, dir string, open func(pod, container string) Opener, retry time.Duration) (*Keeper, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("the directory for the pods' logs: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	k := &Keeper{dir: dir, cs: cs, ns: ns, retry: retry, ctx: ctx, cancel: cancel,
		follows: map[types.UID]map[string]context.CancelFunc{}}
	k.open = open
	if k.open == nil {
		k.open = k.apiOpener
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.podSeen(obj) },
		UpdateFunc: func(_, obj any) { k.podSeen(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				k.podGone(p)
			}
		},
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("watch the pods of %s: %w", ns, err)
	}
	factory.Start(ctx.Done())
	syncCtx, synced := context.WithTimeout(ctx, time.Minute)
	defer synced()
	if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		cancel()
		factory.Shutdown()
		return nil, fmt.Errorf("the pods of %s were not listed within a minute", ns)
	}
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		<-ctx.Done()
		factory.Shutdown()
	}()
	return k, nil
}

// Dir is where the logs are.
func (k *Keeper) Dir() string { return k.dir }

// Stop stops every stream and waits for them.
func (k *Keeper) Stop() {
	k.cancel()
	k.wg.Wait()
}

// podSeen follows each container of the pod that has started.
func (k *Keeper) podSeen(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, st := range statuses {
		if st.ContainerID != "" {
			k.follow(p, st.Name)
		}
	}
}

func (k *Keeper) follow(p *corev1.Pod, container string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.follows[p.UID][container]; ok || k.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(k.ctx)
	if k.follows[p.UID] == nil {
		k.follows[p.UID] = map[string]context.CancelFunc{}
	}
	k.follows[p.UID][container] = cancel
	path := filepath.Join(k.dir, p.Name+"_"+container+".log")
	name := p.Name
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return
		}
		defer func() { _ = f.Close() }()
		Follow(ctx, k.open(name, container), f, k.retry)
	}()
}

// apiOpener streams a container's log through the API server.
func (k *Keeper) apiOpener(pod, container string) Opener {
	return func(ctx context.Context, since *time.Time) (io.ReadCloser, error) {
		opts := &corev1.PodLogOptions{Container: container, Follow: true, Timestamps: true}
		if since != nil {
			t := metav1.NewTime(*since)
			opts.SinceTime = &t
		}
		return k.cs.CoreV1().Pods(k.ns).GetLogs(pod, opts).Stream(ctx)
	}
}

// podGone ends the pod's streams a little after the pod is gone: its
// containers stopped before, so the streams have ended or are reading the
// last lines.
func (k *Keeper) podGone(p *corev1.Pod) {
	k.mu.Lock()
	cancels := k.follows[p.UID]
	delete(k.follows, p.UID)
	k.mu.Unlock()
	for _, c := range cancels {
		time.AfterFunc(gone, c)
	}
}
