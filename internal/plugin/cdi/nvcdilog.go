package cdi

import (
	"fmt"

	"k8s.io/klog/v2"
)

// Verbosity of nvcdi's messages in the plugin's log. nvcdi (and the lookup,
// driver-root and go-nvlib code it hands its logger to) logs through
// logrus by default: unstructured lines on stderr in the middle of klog's.
// nvcdiLogger sends them through klog instead, under the logger name
// "nvcdi", with these levels. nvcdi warns about every optional library it
// does not find ("Could not locate libnvidia-egl-wayland.so.*.*", about 160
// lines on an H200 host), which is expected on every node, and logs an
// Info per file it selects; so that the default verbosity of the chart
// (-v=2) stays quiet, its warnings are V(3), its infos V(5) (above the
// V(4) of every prepare) and its debug and trace messages V(6) and V(7).
// Its errors are klog errors, always shown.
const (
	nvcdiWarningV = 3
	nvcdiInfoV    = 5
	nvcdiDebugV   = 6
	nvcdiTraceV   = 7
)

// nvcdiLog implements the logger interface of nvidia-container-toolkit
// (internal/logger.Interface: Debugf, Errorf, Infof, Warningf, Tracef) and
// that of go-nvlib's info package on top of a klog.Logger. nvcdi's
// messages are printf-formatted; each becomes one klog message, with
// nvcdi's own severity as the key "level".
type nvcdiLog struct {
	logger klog.Logger
}

// nvcdiLogger returns the logger to give nvcdi.WithLogger: logger (the
// caller's, from klog.FromContext) named "nvcdi".
func nvcdiLogger(logger klog.Logger) *nvcdiLog {
	return &nvcdiLog{logger: logger.WithName("nvcdi")}
}

func (l *nvcdiLog) Errorf(format string, args ...any) {
	l.logger.Error(nil, fmt.Sprintf(format, args...), "level", "error")
}

func (l *nvcdiLog) Warningf(format string, args ...any) {
	l.info(nvcdiWarningV, "warning", format, args)
}

func (l *nvcdiLog) Infof(format string, args ...any) {
	l.info(nvcdiInfoV, "info", format, args)
}

func (l *nvcdiLog) Debugf(format string, args ...any) {
	l.info(nvcdiDebugV, "debug", format, args)
}

func (l *nvcdiLog) Tracef(format string, args ...any) {
	l.info(nvcdiTraceV, "trace", format, args)
}

func (l *nvcdiLog) info(v int, level, format string, args []any) {
	if logger := l.logger.V(v); logger.Enabled() { // format only what is shown
		logger.Info(fmt.Sprintf(format, args...), "level", level)
	}
}
