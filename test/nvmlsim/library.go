package nvmlsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpudra/gpudra/test/sim"
)

// FaultPollInterval is how often the fault file is read.
const FaultPollInterval = 100 * time.Millisecond

// Library is the state behind the exported C functions: the reference
// count of nvmlInit/nvmlShutdown, the simulated node of the current
// session, and the handle table. Its methods are named after the NVML
// functions and take their arguments as the C caller passes them (handles
// as uintptr, out-parameters as unsafe.Pointer). Safe for concurrent use.
type Library struct {
	// Getenv reads the process environment as it is at the call (the C
	// library's getenv: a Go runtime only sees its own copy).
	Getenv func(string) string
	// SelfPaths returns candidate paths of the library file.
	SelfPaths func() []string
	// Stderr receives init errors and the trace; os.Stderr when nil.
	Stderr io.Writer
	// OnOpen, when set, runs after an nvmlInit that built the simulated
	// node (not after one that only counts).
	OnOpen func()

	mu   sync.Mutex // serializes Init and Shutdown
	refs int
	cur  atomic.Pointer[session]

	handles *handleTable
	// eventSets maps event set serial numbers to the sim's event sets.
	eventSets sync.Map // uint64 -> nvml.EventSet
	setSerial atomic.Uint64
	// gpmSamples maps GPM sample serial numbers to the sim's samples.
	gpmSamples   sync.Map // uint64 -> nvml.GpmSample
	sampleSerial atomic.Uint64
}

// New returns a library that is not initialized.
func New(getenv func(string) string, selfPaths func() []string) *Library {
	return &Library{Getenv: getenv, SelfPaths: selfPaths, handles: newHandleTable()}
}

// session is one nvmlInit ... last nvmlShutdown.
type session struct {
	root  string
	cfg   *Config
	srv   *sim.Server
	stop  context.CancelFunc
	done  chan struct{}
	trace *tracer
}

// initError carries the NVML code an init failure is reported with.
type initError struct {
	ret nvml.Return
	err error
}

func (e *initError) Error() string { return e.err.Error() }
func (e *initError) Unwrap() error { return e.err }

func (l *Library) stderr() io.Writer {
	if l.Stderr != nil {
		return l.Stderr
	}
	return os.Stderr
}

// Init is nvmlInit_v2 (and nvmlInit, nvmlInitWithFlags). The first call
// loads the configuration and builds the simulated node; later calls only
// count. A failure is explained on stderr.
func (l *Library) Init() (ret nvml.Return) {
	defer l.recoverPanic("nvmlInit", &ret)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs > 0 {
		l.refs++
		return nvml.SUCCESS
	}
	s, err := l.open()
	if err != nil {
		_, _ = fmt.Fprintf(l.stderr(), "gpudra simulated NVML: nvmlInit failed: %v\n", err)
		var ie *initError
		if errors.As(err, &ie) {
			return ie.ret
		}
		return nvml.ERROR_UNKNOWN
	}
	l.cur.Store(s)
	l.refs = 1
	if l.OnOpen != nil {
		l.OnOpen()
	}
	return nvml.SUCCESS
}

func (l *Library) open() (*session, error) {
	var self []string
	if l.SelfPaths != nil {
		self = l.SelfPaths()
	}
	root, err := FindRoot(l.Getenv(RootEnv), self)
	if err != nil {
		return nil, &initError{nvml.ERROR_DRIVER_NOT_LOADED, err}
	}
	cfg, err := LoadConfig(root)
	if err != nil {
		return nil, &initError{nvml.ERROR_DRIVER_NOT_LOADED, err}
	}
	p, err := sim.Load(cfg.Profile, cfg.ProfileDirs)
	if err != nil {
		return nil, &initError{nvml.ERROR_UNKNOWN, fmt.Errorf("%s: %w", rootConfig(root), err)}
	}
	srv := sim.NewServer(p, cfg.Node)
	if cfg.ProcessDir != "" {
		srv.SetProcessDir(cfg.ProcessDir)
	}
	if cfg.StateFile != "" {
		if err := srv.PersistTo(cfg.StateFile); err != nil {
			return nil, &initError{nvml.ERROR_UNKNOWN, fmt.Errorf("MIG state file %s (from %s): %w", cfg.StateFile, rootConfig(root), err)}
		}
	}
	if ret := srv.Init(); ret != nvml.SUCCESS {
		return nil, &initError{ret, fmt.Errorf("simulated node %s: %w", cfg.Node, ret)}
	}
	trace, err := newTracer(l.Getenv(TraceEnv), l.stderr())
	if err != nil {
		return nil, &initError{nvml.ERROR_UNKNOWN, err}
	}
	s := &session{root: root, cfg: cfg, srv: srv, trace: trace, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	if cfg.FaultFile == "" {
		close(s.done)
		return s, nil
	}
	ff := sim.NewFaultFile(cfg.FaultFile, srv)
	// Apply what the file holds before the first query; Watch keeps
	// applying it (lines already applied are not injected again).
	if err := ff.Sync(); err != nil {
		_, _ = fmt.Fprintf(l.stderr(), "gpudra simulated NVML: %v\n", err)
	}
	go func() {
		defer close(s.done)
		ff.Watch(ctx, FaultPollInterval)
	}()
	return s, nil
}

func rootConfig(root string) string { return root + "/" + ConfigPath }

// Shutdown is nvmlShutdown. The last one stops the fault watcher and drops
// the simulated node; its MIG state lives on in the state file.
func (l *Library) Shutdown() (ret nvml.Return) {
	defer l.recoverPanic("nvmlShutdown", &ret)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	l.refs--
	if l.refs > 0 {
		return nvml.SUCCESS
	}
	s := l.cur.Swap(nil)
	s.stop()
	<-s.done
	_ = s.srv.Shutdown()
	s.trace.close()
	// Event sets and GPM samples do not outlive the session.
	l.eventSets.Range(func(k, _ any) bool {
		l.eventSets.Delete(k)
		l.handles.releaseKey(key{kind: kindEventSet, set: k.(uint64)})
		return true
	})
	l.gpmSamples.Range(func(k, _ any) bool {
		l.gpmSamples.Delete(k)
		l.handles.releaseKey(key{kind: kindGPMSample, set: k.(uint64)})
		return true
	})
	return nvml.SUCCESS
}

// enter starts an NVML call: it returns the current session, or
// ERROR_UNINITIALIZED.
func (l *Library) enter(name string) (*session, nvml.Return) {
	s := l.cur.Load()
	if s == nil {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	s.trace.call(name)
	return s, nvml.SUCCESS
}

// recoverPanic turns a panic of an NVML call into ERROR_UNKNOWN: a Go
// panic in the library would end the caller's process.
func (l *Library) recoverPanic(name string, ret *nvml.Return) {
	if p := recover(); p != nil {
		_, _ = fmt.Fprintf(l.stderr(), "gpudra simulated NVML: %s panicked (returning ERROR_UNKNOWN): %v\n%s\n", name, p, debug.Stack())
		*ret = nvml.ERROR_UNKNOWN
	}
}

// NotSupported answers an NVML function the simulator does not model.
func (l *Library) NotSupported(name string) nvml.Return {
	if s := l.cur.Load(); s != nil {
		s.trace.call(name + " (not simulated)")
	}
	return nvml.ERROR_NOT_SUPPORTED
}

// ErrorString is nvmlErrorString, without the C string.
func ErrorString(r nvml.Return) string { return r.Error() }
