package main

import (
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kube-rdma/kube-rdma/internal/version"
	"github.com/kube-rdma/kube-rdma/pkg/client/clientset"
)

// kubeconfigHelp is --kubeconfig's help: the one rule by which the daemon
// finds its API server.
const kubeconfigHelp = "kubeconfig of the API server (RDMANodeState, --dra); empty: the in-cluster config (the pod's ServiceAccount). Nothing else is tried: not $KUBECONFIG, not ~/.kube/config"

// apiClients is the daemon's one connection to the API server: one
// rest.Config, one HTTP client (one connection pool, one rate limiter per
// client), and the clients every API user shares: the node-state publisher
// and the DRA front end.
type apiClients struct {
	kube kubernetes.Interface
	rdma clientset.Interface
}

// apiConn is the outcome of resolving the API server once at start: clients or
// why there are none. Each user turns err into its own refusal (or, for an
// implicit --node-state outside a cluster, into "off").
type apiConn struct {
	clients *apiClients
	err     error
}

// connect resolves the API server when some user needs one (need false:
// none does, nothing is resolved and err says so).
func connect(kubeconfig string, need bool) apiConn {
	if !need {
		return apiConn{err: errors.New("no API user enabled")}
	}
	rc, err := restConfig(kubeconfig)
	if err != nil {
		return apiConn{err: err}
	}
	c, err := newAPIClients(rc)
	return apiConn{clients: c, err: err}
}

// restConfig is the one rule: --kubeconfig when given, else the in-cluster
// config. The error names what was tried; outside a cluster without
// --kubeconfig it wraps rest.ErrNotInCluster.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig, and no in-cluster config: %w", err)
	}
	return rc, nil
}

// newAPIClients builds every client on rc and one HTTP client.
func newAPIClients(rc *rest.Config) (*apiClients, error) {
	rc = rest.CopyConfig(rc)
	if rc.UserAgent == "" {
		rc.UserAgent = "kube-rdma-device-plugin/" + version.Get().Version
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes http client: %w", err)
	}
	kube, err := kubernetes.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rdma, err := clientset.NewForConfigAndClient(rc, hc)
	if err != nil {
		return nil, fmt.Errorf("kube-rdma client: %w", err)
	}
	return &apiClients{kube: kube, rdma: rdma}, nil
}
