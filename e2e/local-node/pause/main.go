// Command pause is the sandbox ("pause") container of the local-node e2e, where no image can
// be pulled: it holds the pod's namespaces open, reaps the zombies of processes that share its
// PID namespace, and exits 0 on SIGINT or SIGTERM. Built static into the pause image by
// e2e/local-node/images.sh.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
