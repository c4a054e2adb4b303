package suite

// The environment contract. The harness (e2e/local-node/run.sh, e2e/kind-rxe/run.sh) provisions
// a cluster and its node hook; everything else (the chart's values in each phase, what the node
// must then show) is decided here, from the hook's description of the node (hook describe).
//
//	E2E_KUBECONFIG  the cluster's kubeconfig; unset (or E2E_SKIP=1): every cluster test
//	                skips. Not KUBECONFIG: `make test` (go test ./...) must never run
//	                the suite against whatever cluster a developer's shell points at
//	E2E_NODE_HOOK   executable: `hook <verb> [args]` (describe, links, records, leases,
//	                port-state DEV PORT up|down, restart-kubelet, runtime-memlock, node-state,
//	                start fakegpu|fakegpudra); NODE=<node> in its environment picks the node
//	                where the harness has several
//	E2E_HELM        the helm binary (default: helm on PATH)
//	E2E_REPORT      file the figures of the run are appended to (optional)
//
// TestCluster (phases_test.go) runs the harness's phases in order, each one: helm install
// with the phase's values, the phase's tests, helm uninstall and the check that the node is
// as before the install.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const hostnameLabel = "kubernetes.io/hostname"

// pool is a pool the node must advertise in a phase.
type pool struct {
	name  string
	mode  string // exclusive or shared
	count int64  // expected allocatable
}

type helmConfig struct {
	bin, release, namespace, chart string
	// chartArgs go with chart to helm: --version and --plain-http of a chart from a registry
	// (registry_test.go).
	chartArgs []string
}

// config is what the tests of a phase expect; the phase sets it (phases_test.go).
type config struct {
	// ncclPools are the pools that set NCCL's variables; nil: every pool.
	ncclPools   []string
	node        string
	hook        string
	image       string // test image with busybox sh and ip
	pullPolicy  corev1.PullPolicy
	prefix      string
	pools       []pool
	chainedPool string // the pool whose netdevs the chained CNI moves into pods
	portDevice  string // RDMA device of an exclusive pool the port-down test toggles (port 1)
	// fixtureDevs: the node's RDMA devices are fixtures (device nodes with no driver behind
	// them, no RDMA device in the kernel): doctor's in-container checks of them must fail,
	// and say why.
	fixtureDevs  bool
	helm         helmConfig
	parallelPods int
	report       string
	// memlock: pool -> the RLIMIT_MEMLOCK (bytes or "unlimited") the daemon's NRI plugin
	// gives a container with a device of the pool; daemonState: the daemon's /state URL,
	// daemonMetrics its /metrics.
	memlock       map[string]string
	daemonState   string
	daemonMetrics string
	gpuAligned    *gpuAlignedConfig
	dra           *draConfig
	upgradeTo     *upgradeConfig
	faults        *faultsConfig
}

// env is what every cluster test gets: the phase's configuration, the clients and the node
// under test.
type env struct {
	config
	rest     *rest.Config
	core     corev1client.CoreV1Interface
	apps     appsv1client.AppsV1Interface
	draAPI   resourcev1client.ResourceV1Interface
	dynamic  dynamic.Interface
	hostname string // the node's kubernetes.io/hostname label
}

var (
	theEnv     *env
	skipReason = "no cluster: set E2E_KUBECONFIG (make e2e-local runs the suite on a node it starts)"
)

func TestMain(m *testing.M) {
	if os.Getenv("E2E_SKIP") == "1" {
		skipReason = "E2E_SKIP=1"
	} else if os.Getenv("E2E_KUBECONFIG") != "" {
		e, err := setup()
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e/suite: %v (E2E_SKIP=1 skips the suite)\n", err)
			os.Exit(2)
		}
		theEnv = e
	}
	os.Exit(m.Run())
}

// need returns the suite's environment, or skips t when there is no cluster.
func need(t *testing.T) *env {
	t.Helper()
	if theEnv == nil {
		t.Skip(skipReason)
	}
	return theEnv
}

// setup builds the clients; the node and the rest of the configuration come from the harness
// (TestCluster).
func setup() (*env, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("E2E_KUBECONFIG"))
	if err != nil {
		return nil, fmt.Errorf("load E2E_KUBECONFIG %s: %w", os.Getenv("E2E_KUBECONFIG"), err)
	}
	rc.QPS, rc.Burst = 50, 100 // the parallel test creates and deletes pods at once
	e := &env{rest: rc, config: config{
		hook:         os.Getenv("E2E_NODE_HOOK"),
		pullPolicy:   corev1.PullNever,
		prefix:       "rdma.kube-rdma.io",
		parallelPods: 20,
		report:       os.Getenv("E2E_REPORT"),
		helm:         helmConfig{bin: orDefault(os.Getenv("E2E_HELM"), "helm"), release: "kube-rdma", namespace: "kube-rdma"},
	}}
	if e.hook == "" {
		return nil, fmt.Errorf("E2E_NODE_HOOK unset: the suite needs the node hook")
	}
	if e.helm.chart, err = chartDir(); err != nil {
		return nil, err
	}
	if e.core, err = corev1client.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("core client: %w", err)
	}
	if e.apps, err = appsv1client.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("apps client: %w", err)
	}
	if e.draAPI, err = resourcev1client.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("resource client: %w", err)
	}
	if e.dynamic, err = dynamic.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return e, nil
}

// setNode makes name the node under test.
func (e *env) setNode(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := e.core.Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", name, err)
	}
	e.node, e.hostname = n.Name, n.Labels[hostnameLabel]
	if e.hostname == "" {
		return fmt.Errorf("node %s has no %s label to pin pods with", n.Name, hostnameLabel)
	}
	return nil
}

func (c *config) pool(name string) *pool { return poolOf(c.pools, name) }

func poolOf(pools []pool, name string) *pool {
	for i := range pools {
		if pools[i].name == name {
			return &pools[i]
		}
	}
	return nil
}

// exclusivePools returns the exclusive pools with at least one device.
func (c *config) exclusivePools() []pool {
	var out []pool
	for _, p := range c.pools {
		if p.mode == "exclusive" && p.count > 0 {
			out = append(out, p)
		}
	}
	return out
}

// devicePool is the pool pods with one device use when a test does not care
// which: the chained pool (so netdevs are checked too), else the first
// non-empty exclusive pool. It fails t when there is none.
func (e *env) devicePool(t *testing.T) pool {
	t.Helper()
	if p := e.pool(e.chainedPool); p != nil && p.count > 0 {
		return *p
	}
	if ps := e.exclusivePools(); len(ps) > 0 {
		return ps[0]
	}
	t.Fatal("the phase has no exclusive pool with devices")
	return pool{}
}

func (e *env) resource(pool string) corev1.ResourceName {
	return corev1.ResourceName(e.prefix + "/" + pool)
}

// nccl reports whether pool sets NCCL's variables (the phase's ncclPools).
func (c *config) nccl(pool string) bool {
	return c.ncclPools == nil || slices.Contains(c.ncclPools, pool)
}
