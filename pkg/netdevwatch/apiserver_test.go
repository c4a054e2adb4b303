package netdevwatch

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/apiserverassets"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

// TestKubeAgainstAPIServer: Kube under exactly the chart's
// files/netdev-check-rules.yaml, bound to the chart's ServiceAccount on a
// real API server (with the DRA front end's files/dra-rules.yaml): it reads
// a pod's UID and sandbox time, says a deleted pod is not found, names the
// pod of a UID a claim is reserved for, and posts a Warning Event on the pod, whose repeat
// client-go's recorder aggregates with a PATCH.
func TestKubeAgainstAPIServer(t *testing.T) {
	assets := apiserverassets.Dir(t)
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	// The DRA front end's rules too: with it, the detector reads a claim
	// to name the pod of a UID (PodOfClaim).
	var rules []rbacv1.PolicyRule
	for _, f := range []string{"netdev-check-rules.yaml", "dra-rules.yaml"} {
		data, err := os.ReadFile("../../deploy/helm/kube-rdma/files/" + f)
		if err != nil {
			t.Fatal(err)
		}
		var r []rbacv1.PolicyRule
		if err := yaml.UnmarshalStrict(data, &r); err != nil {
			t.Fatalf("chart rules %s: %v", f, err)
		}
		rules = append(rules, r...)
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kube-rdma"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kube-rdma"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kube-rdma"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-rdma", Name: "kube-rdma"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := env.AddUser(envtest.User{Name: "system:serviceaccount:kube-rdma:kube-rdma", Groups: []string{"system:authenticated"}}, nil)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "train"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := admin.CoreV1().Pods("train").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: "vf-1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(ready)}}
	if _, err := admin.CoreV1().Pods("train").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	k := NewKube(kubernetes.NewForConfigOrDie(u.Config()), "gpu-a")
	t.Cleanup(k.Stop)
	st, err := k.Pod(ctx, "train", "vf-1")
	if err != nil {
		t.Fatalf("Pod: %v", err)
	}
	if st.UID != string(p.UID) || !st.SandboxReady.Equal(ready) {
		t.Errorf("Pod = %+v, want UID %s, sandbox ready %s", st, p.UID, ready)
	}
	if _, err := k.Pod(ctx, "train", "gone"); !errors.Is(err, ErrPodNotFound) {
		t.Errorf("Pod of a missing pod: %v, want ErrPodNotFound", err)
	}
	claim, err := admin.ResourceV1().ResourceClaims("train").Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: "nic"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "nic",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "rdma.kube-rdma.io"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "nic", Driver: "rdma.kube-rdma.io", Pool: "gpu-a/roce", Device: "pci-0000-3b-00-0"}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "vf-1", UID: p.UID}}
	if _, err := admin.ResourceV1().ResourceClaims("train").UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	name, st, err := k.PodOfClaim(ctx, "train", "nic", string(p.UID))
	if err != nil || name != "vf-1" || st.UID != string(p.UID) || !st.SandboxReady.Equal(ready) {
		t.Errorf("PodOfClaim = %q, %+v, %v; want vf-1 of UID %s, sandbox ready %s", name, st, err, p.UID, ready)
	}
	for _, c := range [][2]string{{"nic", "another-uid"}, {"gone", string(p.UID)}} {
		if _, _, err := k.PodOfClaim(ctx, "train", c[0], c[1]); !errors.Is(err, ErrPodNotFound) {
			t.Errorf("PodOfClaim(claim %s, pod %s): %v, want ErrPodNotFound", c[0], c[1], err)
		}
	}
	k.Warn("train", "vf-1", string(p.UID), EventReason, "kube-rdma: pod train/vf-1 holds rdma device(s) mlx5_4 of pool roce-vf")
	k.Warn("train", "vf-1", string(p.UID), EventReason, "kube-rdma: pod train/vf-1 holds rdma device(s) mlx5_4 of pool roce-vf")
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := admin.CoreV1().Events("train").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 1 && l.Items[0].Count == 2 {
			e := l.Items[0]
			if e.Type != corev1.EventTypeWarning || e.Reason != EventReason || e.InvolvedObject.UID != p.UID || e.Source.Host != "gpu-a" {
				t.Errorf("event %+v", e)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %+v: want one, counted twice (created, then patched)", l.Items)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A configuration problem goes on the daemon's Node: an Event in the default namespace,
	// which the same rules allow.
	k.WarnNode(ReasonConfigProblem, `pools "a", "b" all set NCCL's variables and have devices on this node`)
	for {
		l, err := admin.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) == 1 {
			e := l.Items[0]
			if e.Type != corev1.EventTypeWarning || e.Reason != ReasonConfigProblem || e.InvolvedObject.Kind != "Node" ||
				e.InvolvedObject.Name != "gpu-a" || !strings.Contains(e.Message, `pools "a", "b"`) {
				t.Errorf("node event %+v", e)
			}
			break
		}
		if time.Now().After(deadline.Add(10 * time.Second)) {
			t.Fatalf("events in %s: %+v, want the node's", metav1.NamespaceDefault, l.Items)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
