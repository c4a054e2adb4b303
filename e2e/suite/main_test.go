package suite

// The environment contract (a harness sets these; e2e/local-node provides a cluster):
//
//	E2E_KUBECONFIG         the cluster's kubeconfig; unset (or E2E_SKIP=1): every cluster test
//	                       skips. Not KUBECONFIG: `make test` (go test ./...) must never run
//	                       the suite against whatever cluster a developer's shell points at
//	E2E_NODE               node under test; default: the first node whose allocatable has a
//	                       resource of E2E_RESOURCE_PREFIX
//	E2E_NODE_HOOK          executable: `hook <verb> [args]` (links, records, leases,
//	                       port-state DEV PORT up|down, restart-kubelet, node-state)
//	E2E_IMAGE              test image with busybox sh and ip (localhost/rdma-test:e2e)
//	E2E_IMAGE_PULL_POLICY  Never, IfNotPresent or Always (Never)
//	E2E_RESOURCE_PREFIX    rdma.kube-rdma.io
//	E2E_POOLS              name:mode:count,... count = expected allocatable
//	E2E_CHAINED_POOL       pool whose netdevs the chained CNI moves into pods
//	E2E_NCCL_POOLS         pools that set NCCL's variables (config nccl), comma-separated;
//	                       unset: every pool
//	E2E_PORT_DEVICE        RDMA device of an exclusive pool the port-down test toggles (port 1)
//	E2E_FIXTURE_DEVICES=1  the node's RDMA devices are fixtures (device nodes with no driver behind
//	                       them, no RDMA device in the kernel): doctor's in-container checks of
//	                       them must fail, and say why
//	E2E_HELM, E2E_HELM_RELEASE, E2E_HELM_NAMESPACE, E2E_CHART   helm binary, release, chart
//	E2E_NODE_STATE_BEFORE  file with `hook node-state` taken before helm install
//	E2E_MEMLOCK            pool:bytes|unlimited,... the RLIMIT_MEMLOCK the daemon's NRI plugin gives a
//	                       container with a device of the pool; unset: the memlock test skips
//	E2E_DAEMON_STATE       URL of the daemon's /state (the memlock test waits there for NRI)
//	E2E_UNINSTALL=1        run the final uninstall test
//	E2E_PARALLEL_PODS      pods of the parallel test (20)
//	E2E_REPORT             file the parallel test appends its latency line to
//	E2E_GPU_ALIGNED_POOL, E2E_GPU_NICS, E2E_GPU_RESOURCE, E2E_FAKE_RDMA_STATE
//	                       TestGPUAligned's (gpualigned_test.go); unset: it skips
//
// The DRA phase of e2e/local-node/run.sh (dra-phase.sh) adds the variables of dra_test.go.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1client "k8s.io/client-go/kubernetes/typed/resource/v1"
	"k8s.io/client-go/tools/clientcmd"
)

const hostnameLabel = "kubernetes.io/hostname"

// pool is one entry of E2E_POOLS.
type pool struct {
	name  string
	mode  string // exclusive or shared
	count int64  // expected allocatable
}

type helmConfig struct{ bin, release, namespace, chart string }

type config struct {
	// ncclPools are E2E_NCCL_POOLS; nil when unset (every pool).
	ncclPools    []string
	node         string
	hook         string
	image        string
	pullPolicy   corev1.PullPolicy
	prefix       string
	pools        []pool
	chainedPool  string
	portDevice   string
	fixtureDevs  bool
	helm         helmConfig
	stateBefore  string
	uninstall    bool
	parallelPods int
	report       string
}

// env is what every cluster test gets from need: the configuration, the
// clients and the node under test.
type env struct {
	config
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

func setup() (*env, error) {
	cfg, err := parseConfig(os.Getenv)
	if err != nil {
		return nil, err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("E2E_KUBECONFIG"))
	if err != nil {
		return nil, fmt.Errorf("load E2E_KUBECONFIG %s: %w", os.Getenv("E2E_KUBECONFIG"), err)
	}
	rc.QPS, rc.Burst = 50, 100 // the parallel test creates and deletes pods at once
	e := &env{config: cfg}
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := e.pickNode(ctx)
	if err != nil {
		return nil, err
	}
	e.node = node.Name
	e.hostname = node.Labels[hostnameLabel]
	if e.hostname == "" {
		return nil, fmt.Errorf("node %s has no %s label to pin pods with", node.Name, hostnameLabel)
	}
	return e, nil
}

// pickNode returns E2E_NODE, or the first node that advertises a resource
// with the prefix.
func (e *env) pickNode(ctx context.Context) (*corev1.Node, error) {
	if e.node != "" {
		n, err := e.core.Nodes().Get(ctx, e.node, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get node E2E_NODE=%s: %w", e.node, err)
		}
		return n, nil
	}
	nodes, err := e.core.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		for r := range nodes.Items[i].Status.Allocatable {
			if strings.HasPrefix(string(r), e.prefix+"/") {
				return &nodes.Items[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no node of %d advertises a %s/ resource; set E2E_NODE", len(nodes.Items), e.prefix)
}

// parseConfig reads the E2E_* variables through getenv.
func parseConfig(getenv func(string) string) (config, error) {
	or := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	c := config{
		node:        getenv("E2E_NODE"),
		hook:        getenv("E2E_NODE_HOOK"),
		image:       or("E2E_IMAGE", "localhost/rdma-test:e2e"),
		pullPolicy:  corev1.PullPolicy(or("E2E_IMAGE_PULL_POLICY", string(corev1.PullNever))),
		prefix:      or("E2E_RESOURCE_PREFIX", "rdma.kube-rdma.io"),
		chainedPool: getenv("E2E_CHAINED_POOL"),
		portDevice:  getenv("E2E_PORT_DEVICE"),
		fixtureDevs: getenv("E2E_FIXTURE_DEVICES") == "1",
		helm: helmConfig{bin: getenv("E2E_HELM"), release: getenv("E2E_HELM_RELEASE"),
			namespace: getenv("E2E_HELM_NAMESPACE"), chart: getenv("E2E_CHART")},
		stateBefore: getenv("E2E_NODE_STATE_BEFORE"),
		uninstall:   getenv("E2E_UNINSTALL") == "1",
		report:      getenv("E2E_REPORT"),
	}
	if v := getenv("E2E_NCCL_POOLS"); v != "" {
		c.ncclPools = strings.Split(v, ",")
	}
	switch c.pullPolicy {
	case corev1.PullNever, corev1.PullIfNotPresent, corev1.PullAlways:
	default:
		return c, fmt.Errorf("E2E_IMAGE_PULL_POLICY=%s: want Never, IfNotPresent or Always", c.pullPolicy)
	}
	n, err := strconv.Atoi(or("E2E_PARALLEL_PODS", "20"))
	if err != nil || n < 1 {
		return c, fmt.Errorf("E2E_PARALLEL_PODS=%q: want a positive number", getenv("E2E_PARALLEL_PODS"))
	}
	c.parallelPods = n
	if c.pools, err = parsePools(getenv("E2E_POOLS")); err != nil {
		return c, err
	}
	if c.chainedPool != "" {
		p := c.pool(c.chainedPool)
		if p == nil {
			return c, fmt.Errorf("E2E_CHAINED_POOL=%s is not in E2E_POOLS", c.chainedPool)
		}
		if p.mode != "exclusive" {
			return c, fmt.Errorf("E2E_CHAINED_POOL=%s is a %s pool: its netdevs cannot go to one pod", p.name, p.mode)
		}
	}
	return c, nil
}

// parsePools parses E2E_POOLS: name:mode:count, comma-separated.
func parsePools(s string) ([]pool, error) {
	var out []pool
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		f := strings.Split(item, ":")
		if len(f) != 3 || f[0] == "" {
			return nil, fmt.Errorf("E2E_POOLS entry %q: want name:mode:count", item)
		}
		if f[1] != "exclusive" && f[1] != "shared" {
			return nil, fmt.Errorf("E2E_POOLS entry %q: mode %q is not exclusive or shared", item, f[1])
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("E2E_POOLS entry %q: count %q is not a number >= 0", item, f[2])
		}
		if seen[f[0]] {
			return nil, fmt.Errorf("E2E_POOLS: pool %q twice", f[0])
		}
		seen[f[0]] = true
		out = append(out, pool{name: f[0], mode: f[1], count: n})
	}
	return out, nil
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
// non-empty exclusive pool. It skips t when there is none.
func (e *env) devicePool(t *testing.T) pool {
	t.Helper()
	if p := e.pool(e.chainedPool); p != nil && p.count > 0 {
		return *p
	}
	if ps := e.exclusivePools(); len(ps) > 0 {
		return ps[0]
	}
	t.Skip("no exclusive pool with devices in E2E_POOLS")
	return pool{}
}

func (e *env) resource(pool string) corev1.ResourceName {
	return corev1.ResourceName(e.prefix + "/" + pool)
}

// errNoHook is the skip reason of tests that need the node hook.
var errNoHook = errors.New("E2E_NODE_HOOK unset: this test needs the node hook")

func (e *env) needHook(t *testing.T) {
	t.Helper()
	if e.hook == "" {
		t.Skip(errNoHook)
	}
}

func TestParseConfig(t *testing.T) {
	env := map[string]string{
		"E2E_POOLS":        "ib:exclusive:2, vf:exclusive:24,roce-shared:shared:8",
		"E2E_CHAINED_POOL": "vf",
	}
	c, err := parseConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	want := []pool{{"ib", "exclusive", 2}, {"vf", "exclusive", 24}, {"roce-shared", "shared", 8}}
	if fmt.Sprint(c.pools) != fmt.Sprint(want) || c.parallelPods != 20 || c.pullPolicy != corev1.PullNever ||
		c.prefix != "rdma.kube-rdma.io" || c.image != "localhost/rdma-test:e2e" {
		t.Errorf("parseConfig = %+v", c)
	}
	for _, bad := range []map[string]string{
		{"E2E_POOLS": "ib:exclusive"},
		{"E2E_POOLS": "ib:partial:2"},
		{"E2E_POOLS": "ib:exclusive:-1"},
		{"E2E_POOLS": "ib:exclusive:1,ib:shared:2"},
		{"E2E_POOLS": "ib:exclusive:1", "E2E_CHAINED_POOL": "vf"},
		{"E2E_POOLS": "s:shared:1", "E2E_CHAINED_POOL": "s"},
		{"E2E_PARALLEL_PODS": "0"},
		{"E2E_IMAGE_PULL_POLICY": "Sometimes"},
	} {
		if _, err := parseConfig(func(k string) string { return bad[k] }); err == nil {
			t.Errorf("parseConfig(%v): no error", bad)
		}
	}
}

// nccl reports whether pool sets NCCL's variables (E2E_NCCL_POOLS).
func (c *config) nccl(pool string) bool {
	return c.ncclPools == nil || slices.Contains(c.ncclPools, pool)
}
