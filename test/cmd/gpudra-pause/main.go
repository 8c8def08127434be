// Command gpudra-pause is the pause program of the local cluster's sandbox
// image (test/images.PauseImage): the first process of every pod sandbox. It
// sleeps until SIGTERM or SIGINT, then exits 0, and reaps the children it
// inherits as PID 1 of the pod's PID namespace. Built static
// (CGO_ENABLED=0) by `make images`.
package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
)

func main() { os.Exit(run(notify(), reap)) }

// notify installs the handlers of the signals run waits for.
func notify() <-chan os.Signal {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	return sigs
}

// run waits for signals: it reaps children on SIGCHLD and returns the exit
// status 0 on SIGTERM or SIGINT.
func run(sigs <-chan os.Signal, reap func() []int) int {
	reap() // children that ended before the handler was installed
	for s := range sigs {
		switch s {
		case syscall.SIGCHLD:
			reap()
		case syscall.SIGTERM, syscall.SIGINT:
			return 0
		}
	}
	return 0
}

// reap collects every child that has ended, without blocking, and returns
// their PIDs.
func reap() []int {
	var pids []int
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return pids
		}
		pids = append(pids, pid)
	}
}
