package suite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// chartDryRun renders the chart in each CNI mode and with dra.enabled, and has the API
// server validate every object (schemas, defaulting, admission) in a dry-run create: nothing
// is created. The multus mode's NetworkAttachmentDefinitions need their CRD (nadCRD), which
// is created for the check and deleted after it.
func (e *env) chartDryRun(t *testing.T, nadCRD string) {
	t.Helper()
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.helm.namespace}}
	if _, err := e.core.Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", e.helm.namespace, err)
	}
	crd, err := e.createCRD(ctx, nadCRD)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.deleteCRD(context.WithoutCancel(ctx), crd); err != nil {
			t.Error(err)
		}
	}()
	dc, err := discovery.NewDiscoveryClientForConfig(e.rest)
	if err != nil {
		t.Fatalf("discovery client: %v", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, args := range [][]string{
		nil,
		{"--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib"},
		{"--set", "cni.install=true,cni.mode=multus", "--set-json", `cni.networks=[{"name":"rdma-ib","pool":"ib"}]`},
		// The DRA front end: its RBAC and a DeviceClass (resource.k8s.io/v1, its CEL selector
		// compiled by this API server; extendedResourceName is dropped without DRAExtendedResource).
		{"--set", "dra.enabled=true", "--set-json",
			`config.pools=[{"name":"ib","mode":"exclusive","frontend":"dra","selectors":{"linkLayers":["InfiniBand"]}}]`},
	} {
		out, err := e.runHelm(ctx, append(append([]string{"template", e.helm.release}, e.helm.chartRef(e.helm.chart)...), args...)...)
		if err != nil {
			t.Fatal(err)
		}
		err = e.createDryRun(ctx, mapper, out)
		// Discovery may not list a CRD's kind at once after it is Established.
		for deadline := time.Now().Add(30 * time.Second); meta.IsNoMatchError(err) && time.Now().Before(deadline); {
			time.Sleep(time.Second)
			mapper.Reset()
			err = e.createDryRun(ctx, mapper, out)
		}
		if err != nil {
			t.Fatalf("the API server refused the chart's output (%v): %v", args, err)
		}
	}
	e.appendReport(t, "chart output accepted by the API server (dry-run) in CNI modes none, chained, multus, and with dra.enabled")
}

// createDryRun creates every object of the multi-document YAML with dryRun=All.
func (e *env) createDryRun(ctx context.Context, mapper meta.RESTMapper, manifest []byte) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	for n := 0; ; n++ {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			if n == 0 {
				return fmt.Errorf("no objects")
			}
			return nil
		} else if err != nil {
			return fmt.Errorf("decode the chart's output: %w", err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk, u.GetName(), err)
		}
		ri := e.dynamic.Resource(m.Resource)
		opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := u.GetNamespace()
			if ns == "" {
				ns = e.helm.namespace
			}
			_, err = ri.Namespace(ns).Create(ctx, u, opts)
		} else {
			_, err = ri.Create(ctx, u, opts)
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
		}
	}
}

// createCRD creates the CRD in file and waits until it is Established.
func (e *env) createCRD(ctx context.Context, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read CRD: %w", err)
	}
	var obj map[string]any
	if err := utilyaml.Unmarshal(b, &obj); err != nil {
		return "", fmt.Errorf("decode CRD %s: %w", file, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if _, err := e.dynamic.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create CRD %s: %w", u.GetName(), err)
	}
	err = eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		got, err := e.dynamic.Resource(crdGVR).Get(ctx, u.GetName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if c, ok := c.(map[string]any); ok && c["type"] == "Established" && c["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("CRD %s not Established", u.GetName())
	})
	return u.GetName(), err
}

// deleteCRD deletes the CRD and waits until it is gone.
func (e *env) deleteCRD(ctx context.Context, name string) error {
	if err := e.dynamic.Resource(crdGVR).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete CRD %s: %w", name, err)
	}
	return eventually(ctx, time.Minute, func(ctx context.Context) error {
		_, err := e.dynamic.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("CRD %s not deleted yet (%v)", name, err)
	})
}
