// Command pause is the pod sandbox process of the local test cluster
// (hack/cluster-up.sh): containerd's sandbox_image is built from it, since no
// registry is reachable. It waits for SIGINT or SIGTERM and reaps the zombies
// it inherits as PID 1 of a pod with a shared process namespace.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
