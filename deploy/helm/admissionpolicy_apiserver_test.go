package helm

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kube-rdma/kube-rdma/internal/apiserverassets"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/client/clientset"
	"github.com/kube-rdma/kube-rdma/pkg/nodestate"
)

var nodeStates = schema.GroupVersionResource{Group: "rdma.kube-rdma.io", Version: "v1alpha1", Resource: "rdmanodestates"}

// The fixed parts of the policies' messages (templates/admissionpolicy.yaml).
const (
	sliceDenied = "may write only the ResourceSlices of driver rdma.kube-rdma.io on its own node"
	stateDenied = "may write only the RDMANodeState of its own node"
	claimDenied = "may write only the status.devices entries of driver rdma.kube-rdma.io in its own node's pools"
	allocDenied = "may write only the status.devices entries of a claim, not its allocation or reservedFor"
)

// TestAdmissionPolicyAgainstAPIServer applies the chart's RBAC and admission policies, as
// `helm template` renders them (dra and nodeState on), to a real API server, and writes as
// the chart's service account with the tokens the kubelet would give the daemon pods of two
// nodes (TokenRequest bound to a pod on that node): node A writes its own ResourceSlices and
// RDMANodeState, and is refused node B's, and a slice of another driver, with the policy's message;
// with the claim status writer on (CNI chained to a dra pool), node A writes the status.devices
// entries of its own devices in a claim and nothing else of the claim's status.
func TestAdmissionPolicyAgainstAPIServer(t *testing.T) {
	assets := apiserverassets.Dir(t)
	out, err := helmTemplate(t, "--set", "dra.enabled=true,cni.install=true,cni.mode=chained,cni.chained.pool=ib", "--set-json", draPools)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: []string{filepath.Join(chartDir, "crds")},
		ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver and etcd: %v", err)
		}
	})
	admin := kubernetes.NewForConfigOrDie(cfg)
	adminDyn := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-rdma"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyRendered(t, admin, out)

	a := nodeClients(t, admin, cfg, "node-a")
	b := nodeClients(t, admin, cfg, "node-b")

	// The API server loads each new policy asynchronously, one independent of the other:
	// wait until a dry run that each must refuse is refused.
	waitEnforced(t, "node A's dry run of node B's slice", func() error {
		_, err := a.kube.ResourceV1().ResourceSlices().Create(ctx, slice("b-ib", "rdma.kube-rdma.io", "node-b"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	waitEnforced(t, "node A's dry run of node C's node state", func() error {
		_, err := a.dyn.Resource(nodeStates).Create(ctx, nodeState("node-c"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})

	// ResourceSlices: each node creates its own; node A updates and deletes its own.
	slices := a.kube.ResourceV1().ResourceSlices()
	own, err := slices.Create(ctx, slice("a-ib", "rdma.kube-rdma.io", "node-a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node A creates its own slice: %v", err)
	}
	own.Spec.Pool.Generation = 2
	if own, err = slices.Update(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node A updates its own slice: %v", err)
	}
	theirs, err := b.kube.ResourceV1().ResourceSlices().Create(ctx, slice("b-ib", "rdma.kube-rdma.io", "node-b"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node B creates its own slice: %v", err)
	}
	theirs.Spec.Pool.Generation = 2
	_, err = slices.Create(ctx, slice("b-ib-2", "rdma.kube-rdma.io", "node-b"), metav1.CreateOptions{})
	wantDenied(t, "node A creates a slice of node B", err, sliceDenied)
	_, err = slices.Create(ctx, slice("a-gpu", "gpu.example.com", "node-a"), metav1.CreateOptions{})
	wantDenied(t, "node A creates a slice of another driver on its node", err, sliceDenied)
	_, err = slices.Update(ctx, theirs, metav1.UpdateOptions{})
	wantDenied(t, "node A updates node B's slice", err, sliceDenied)
	err = slices.Delete(ctx, theirs.Name, metav1.DeleteOptions{})
	wantDenied(t, "node A deletes node B's slice", err, sliceDenied)
	if err := slices.Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("node A deletes its own slice: %v", err)
	}
	// The chart's service account without a node in its credentials (a client certificate
	// here; a token not bound to a pod on a node, or an API server without
	// ServiceAccountTokenPodNodeInfo) writes nothing, not even a slice naming no node.
	unbound, err := env.AddUser(envtest.User{Name: "system:serviceaccount:kube-rdma:rdma-kube-rdma", Groups: []string{"system:authenticated"}}, nil)
	if err != nil {
		t.Fatalf("add user: %v", err)
	}
	_, err = kubernetes.NewForConfigOrDie(unbound.Config()).ResourceV1().ResourceSlices().Create(ctx, slice("x-ib", "rdma.kube-rdma.io", "node-a"), metav1.CreateOptions{})
	wantDenied(t, "the service account without a node creates a slice", err, "token names no node")

	// RDMANodeState, named after its node: the chart's rules give create and patch (and
	// patch of the status) only, so delete is refused by RBAC before the policy. First the
	// daemon's own writer (server-side apply of the object, then of its status).
	status := &v1alpha1.RDMANodeStateStatus{StateVersion: v1alpha1.StateVersion, DaemonVersion: "test"}
	if err := a.nodeState.Apply(ctx, "node-a", status); err != nil {
		t.Fatalf("node A's daemon publishes its node state: %v", err)
	}
	err = a.nodeState.Apply(ctx, "node-b", status)
	wantDenied(t, "node A's daemon publishes the state of node B", err, stateDenied)
	states := a.dyn.Resource(nodeStates)
	if _, err := b.dyn.Resource(nodeStates).Create(ctx, nodeState("node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node B creates its own node state: %v", err)
	}
	_, err = states.Create(ctx, nodeState("node-c"), metav1.CreateOptions{})
	wantDenied(t, "node A creates another node's state", err, stateDenied)
	patch := []byte(`{"metadata":{"labels":{"patched":"yes"}}}`)
	if _, err := states.Patch(ctx, "node-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Errorf("node A patches its own node state: %v", err)
	}
	// A patch of the status subresource (the objects here have no status, which the schema
	// would require fields of; the subresource's admission is what is checked).
	if _, err := states.Patch(ctx, "node-a", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("node A patches its own node state's status: %v", err)
	}
	_, err = states.Patch(ctx, "node-b", types.MergePatchType, patch, metav1.PatchOptions{})
	wantDenied(t, "node A patches node B's state", err, stateDenied)
	_, err = states.Patch(ctx, "node-b", types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	wantDenied(t, "node A patches node B's state's status", err, stateDenied)
	// The policy binds the chart's service account only: the admin is not judged.
	if err := adminDyn.Resource(nodeStates).Delete(ctx, "node-b", metav1.DeleteOptions{}); err != nil {
		t.Errorf("the admin (not the chart's service account) deletes node B's state: %v", err)
	}

	claimStatusPolicy(t, admin, a, b)
}

// claimStatusPolicy: a claim allocated a device of node A's pool and one of node B's (as
// the scheduler writes it). Each node's daemon applies its own device's entry as
// pkg/claimstatus does (server-side apply of the status); node A is refused node B's
// device, another driver's, a removal of node B's entry, and any change of the
// allocation or reservedFor.
func claimStatusPolicy(t *testing.T, admin kubernetes.Interface, a, b clients) {
	t.Helper()
	ctx := context.Background()
	claims := admin.ResourceV1().ResourceClaims("default")
	claim, err := claims.Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "two-nics"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "nic",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "rdma.kube-rdma.io", AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2}}}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create claim: %v", err)
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Request: "nic", Driver: "rdma.kube-rdma.io", Pool: "node-a/ib", Device: "mlx5-0"},
		{Request: "nic", Driver: "rdma.kube-rdma.io", Pool: "node-b/ib", Device: "mlx5-1"},
	}}}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "0b5f6c1e-0000-4000-8000-000000000001"}}
	if claim, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("allocate claim (as the scheduler): %v", err)
	}
	entry := func(pool, device, ifname string) resourcev1.AllocatedDeviceStatus {
		return resourcev1.AllocatedDeviceStatus{Driver: "rdma.kube-rdma.io", Pool: pool, Device: device,
			NetworkData: &resourcev1.NetworkDeviceData{InterfaceName: ifname, IPs: []string{"10.56.0.7/16"}, HardwareAddress: "02:42:ac:11:00:07"}}
	}
	// The writer's own form of request: server-side apply of the status.devices entries.
	apply := func(c clients, manager string, devices ...resourcev1.AllocatedDeviceStatus) error {
		obj := map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
			"metadata": map[string]any{"name": claim.Name, "namespace": claim.Namespace}, "status": map[string]any{"devices": devices}}
		body, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		_, err = c.kube.ResourceV1().ResourceClaims(claim.Namespace).Patch(ctx, claim.Name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: manager, Force: ptrTo(true)}, "status")
		return err
	}
	waitEnforced(t, "node A's dry run of node B's device's entry", func() error {
		body, err := json.Marshal(map[string]any{"status": map[string]any{"devices": []resourcev1.AllocatedDeviceStatus{entry("node-b/ib", "mlx5-1", "net9")}}})
		if err != nil {
			return err
		}
		_, err = a.kube.ResourceV1().ResourceClaims(claim.Namespace).Patch(ctx, claim.Name, types.MergePatchType, body,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return err
	})
	if err := apply(a, "kube-rdma.io/node-a", entry("node-a/ib", "mlx5-0", "net1")); err != nil {
		t.Fatalf("node A writes its own device's entry: %v", err)
	}
	if err := apply(b, "kube-rdma.io/node-b", entry("node-b/ib", "mlx5-1", "net2")); err != nil {
		t.Fatalf("node B writes its own device's entry: %v", err)
	}
	if err := apply(a, "kube-rdma.io/node-a", entry("node-a/ib", "mlx5-0", "net3")); err != nil {
		t.Errorf("node A changes its own device's entry: %v", err)
	}
	err = apply(a, "kube-rdma.io/node-a", entry("node-a/ib", "mlx5-0", "net3"), entry("node-b/ib", "mlx5-1", "net9"))
	wantDenied(t, "node A writes node B's device's entry", err, claimDenied)
	// (An entry of another driver or of a device not allocated in the claim is refused by the
	// API server's validation before any policy: "must be an allocated device in the claim".)
	cur, err := a.kube.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node A reads the claim: %v", err)
	}
	if len(cur.Status.Devices) != 2 {
		t.Fatalf("claim status has %d device entries, want node A's and node B's: %+v", len(cur.Status.Devices), cur.Status.Devices)
	}
	// The chart grants patch only (no update): the other writes a daemon could try.
	patch := func(pt types.PatchType, body string) error {
		_, err := a.kube.ResourceV1().ResourceClaims(claim.Namespace).Patch(ctx, claim.Name, pt, []byte(body), metav1.PatchOptions{}, "status")
		return err
	}
	onlyA, err := json.Marshal(map[string]any{"status": map[string]any{"devices": []resourcev1.AllocatedDeviceStatus{entry("node-a/ib", "mlx5-0", "net3")}}})
	if err != nil {
		t.Fatal(err)
	}
	wantDenied(t, "node A removes node B's entry", patch(types.MergePatchType, string(onlyA)), claimDenied)
	wantDenied(t, "node A clears the claim's reservedFor", patch(types.MergePatchType, `{"status":{"reservedFor":null}}`), allocDenied)
	// An allocation is immutable once written, but it may be removed with the reservations
	// (deallocation, the claim controller's job): that would free node B's device too.
	wantDenied(t, "node A deallocates the claim",
		patch(types.JSONPatchType, `[{"op":"remove","path":"/status/reservedFor"},{"op":"remove","path":"/status/allocation"}]`), allocDenied)
	// Removing its own entry (the writer's apply without it, after DEL) is allowed.
	if err := apply(a, "kube-rdma.io/node-a"); err != nil {
		t.Errorf("node A removes its own device's entry: %v", err)
	}
}

// waitEnforced retries write, a dry run an admission policy refuses, until it is refused
// (Forbidden), for at most 30 s.
func waitEnforced(t *testing.T, what string, write func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := write()
		if apierrors.IsForbidden(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy is not enforced within 30s: %s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func wantDenied(t *testing.T, what string, err error, msg string) {
	t.Helper()
	var status *apierrors.StatusError
	if !apierrors.IsForbidden(err) || !errors.As(err, &status) {
		t.Errorf("%s: got %v, want Forbidden by the admission policy", what, err)
		return
	}
	if !strings.Contains(status.ErrStatus.Message, msg) {
		t.Errorf("%s: Forbidden %q, want the policy's message (%q)", what, status.ErrStatus.Message, msg)
	}
}

// applyRendered creates the rendered objects the policy test needs: the service account, its
// RBAC and the admission policies. The DaemonSet and the rest are not needed.
func applyRendered(t *testing.T, kube kubernetes.Interface, rendered []byte) {
	t.Helper()
	ctx := context.Background()
	var policies int
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if runtime.IsNotRegisteredError(err) {
			continue // a kind client-go does not know (the chart's own, not applied here)
		}
		if err != nil {
			t.Fatalf("decode rendered document: %v\n%s", err, doc)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = kube.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = kube.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicy:
			policies++
			_, err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("apply rendered %T: %v", obj, err)
		}
	}
	if policies != 3 {
		t.Fatalf("%d ValidatingAdmissionPolicies rendered, want 3 (resourceslices, rdmanodestates, claimstatus)", policies)
	}
}

type clients struct {
	kube      kubernetes.Interface
	dyn       dynamic.Interface
	nodeState *nodestate.Client // the daemon's RDMANodeState writer
}

// nodeClients creates a Node and a daemon Pod on it, and returns clients authenticated with a
// token of the chart's service account bound to that Pod, as the kubelet projects it: the API
// server names the Pod's node in the user's extra authentication.kubernetes.io/node-name.
func nodeClients(t *testing.T, admin kubernetes.Interface, cfg *rest.Config, node string) clients {
	t.Helper()
	ctx := context.Background()
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods("kube-rdma").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "rdma-kube-rdma-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "rdma-kube-rdma", AutomountServiceAccountToken: ptrTo(false),
			Containers: []corev1.Container{{Name: "device-plugin", Image: "kube-rdma"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the daemon pod of %s: %v", node, err)
	}
	tr, err := admin.CoreV1().ServiceAccounts("kube-rdma").CreateToken(ctx, "rdma-kube-rdma", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("request a token bound to %s: %v", pod.Name, err)
	}
	c := rest.AnonymousClientConfig(cfg)
	c.BearerToken = tr.Status.Token
	kube := kubernetes.NewForConfigOrDie(c)
	// The precondition of the whole test: the token names the node.
	review, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("who is the token of %s: %v", node, err)
	}
	if got := review.Status.UserInfo.Extra["authentication.kubernetes.io/node-name"]; len(got) != 1 || got[0] != node {
		t.Fatalf("the token of %s: user %q, extra node-name %v, want [%s]", pod.Name, review.Status.UserInfo.Username, got, node)
	}
	rdma := clientset.NewForConfigOrDie(c)
	return clients{kube: kube, dyn: dynamic.NewForConfigOrDie(c), nodeState: nodestate.NewClient(kube.CoreV1(), rdma.RDMAV1alpha1())}
}

func slice(name, driver, node string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.ResourceSliceSpec{
		Driver: driver, NodeName: ptrTo(node), Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1}}}
}

func nodeState(node string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rdma.kube-rdma.io/v1alpha1", "kind": "RDMANodeState",
		"metadata": map[string]any{"name": node},
	}}
}

func ptrTo[T any](v T) *T { return &v }
