// Command kubectl-rdma is the kubectl plugin for kube-rdma (`kubectl rdma`).
// It wires the process's streams, signals and exit status to
// pkg/kubectlrdma, which holds the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kube-rdma/kube-rdma/pkg/kubectlrdma"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kubectlrdma.Execute(ctx, os.Args[1:], kubectlrdma.Options{
		Streams: genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr},
		Color:   kubectlrdma.IsTerminal(os.Stdout),
	})
	stop()
	os.Exit(code)
}
