package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-rdma/kube-rdma/internal/cli"
)

const waitDSUsage = `usage: device-plugin wait-daemonset --namespace NS --name NAME [--cover DS] [flags]

Wait until every pod the DaemonSet NAME schedules is up to date and ready,
then exit 0. The chart's pre-delete hook runs it in a Job after creating the
uninstall DaemonSet (kube-rdma uninstall on every node), so that helm deletes
the agent's DaemonSet only once every node has marked the uninstall
(docs/cni.md, Installing). With --cover DS it also waits until NAME
schedules at least as many pods as DS has on nodes (scheduled where it
should run, and still running where it no longer should, as on a node
tainted since its pod started): "0 of 0 ready" is not done while the agent
runs somewhere. After --timeout it prints which count is short and exits 0
anyway (an unreachable node must not block an uninstall; that node keeps
the CNI entry and binary until 'kube-rdma uninstall' runs there) unless
--fail-on-timeout. Needs get on both DaemonSets.

Flags:
`

func waitDaemonSetCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("wait-daemonset", flag.ContinueOnError)
	ns := fs.String("namespace", "", "the DaemonSet's namespace (required)")
	name := fs.String("name", "", "the DaemonSet's name (required)")
	cover := fs.String("cover", "", "a DaemonSet of the same namespace whose nodes NAME must cover (the agent's)")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait")
	failOnTimeout := fs.Bool("fail-on-timeout", false, "exit 1 instead of 0 when --timeout passes first")
	kubeconfig := fs.String("kubeconfig", "", kubeconfigHelp)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), waitDSUsage)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *ns == "" || *name == "" {
		return cli.Usagef("wait-daemonset: --namespace and --name are required")
	}
	if *timeout <= 0 {
		return cli.Usagef("wait-daemonset: --timeout must be positive")
	}
	rc, err := restConfig(*kubeconfig)
	if err != nil {
		return fmt.Errorf("wait-daemonset: %w", err)
	}
	c, err := newAPIClients(rc)
	if err != nil {
		return fmt.Errorf("wait-daemonset: %w", err)
	}
	start := time.Now()
	n, err := waitDaemonSet(ctx, c.kube, *ns, *name, *cover, *timeout, time.Second)
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "DaemonSet %s/%s: every pod (%d) up to date and ready after %s\n", *ns, *name, n, time.Since(start).Round(time.Millisecond))
		return nil
	case errors.Is(err, context.DeadlineExceeded) && !*failOnTimeout:
		fmt.Fprintf(stderr, "device-plugin: wait-daemonset: going on after %s: %v\n", *timeout, err)
		return nil
	}
	return fmt.Errorf("wait-daemonset: %w", err)
}

// waitDaemonSet polls the DaemonSet every interval until dsDone says it is
// done and, with cover set, it schedules at least as many pods as the
// DaemonSet cover has on nodes, or timeout; the error then wraps
// context.DeadlineExceeded and says which count is short. It returns the
// number of pods it waited for.
func waitDaemonSet(ctx context.Context, kube kubernetes.Interface, ns, name, cover string, timeout, interval time.Duration) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ds, err := kube.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			last = dsDone(ds)
		} else {
			last = err
		}
		if last == nil && cover != "" {
			last = covers(ctx, kube, ds, cover)
		}
		if last == nil {
			return ds.Status.DesiredNumberScheduled, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %v", ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// covers says why ds does not schedule a pod on each node where the
// DaemonSet cover has one. A node tainted after cover's pod started there
// keeps that pod (counted as misscheduled where the taint is not tolerated),
// so both counts are nodes whose files the uninstall must reach.
func covers(ctx context.Context, kube kubernetes.Interface, ds *appsv1.DaemonSet, cover string) error {
	agent, err := kube.AppsV1().DaemonSets(ds.Namespace).Get(ctx, cover, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("DaemonSet %s/%s to cover: %w", ds.Namespace, cover, err)
	}
	on := agent.Status.CurrentNumberScheduled + agent.Status.NumberMisscheduled
	if ds.Status.DesiredNumberScheduled < on {
		return fmt.Errorf("DaemonSet %s/%s schedules %d pods, DaemonSet %s has pods on %d nodes (%d scheduled, %d misscheduled)",
			ds.Namespace, ds.Name, ds.Status.DesiredNumberScheduled, cover, on, agent.Status.CurrentNumberScheduled, agent.Status.NumberMisscheduled)
	}
	return nil
}

// dsDone says why ds has not every pod up to date and ready.
func dsDone(ds *appsv1.DaemonSet) error {
	s := ds.Status
	if s.ObservedGeneration < ds.Generation || s.UpdatedNumberScheduled != s.DesiredNumberScheduled || s.NumberReady != s.DesiredNumberScheduled {
		return fmt.Errorf("DaemonSet %s/%s generation %d: observed %d, desired %d, updated %d, ready %d",
			ds.Namespace, ds.Name, ds.Generation, s.ObservedGeneration, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady)
	}
	return nil
}
