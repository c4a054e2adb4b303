package suite

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The chart and image from an OCI registry, as users install a release: the harness
// runs `make release` against a registry of its own, and `hook describe` names
//
//	chart oci://HOST:PORT/PATH/kube-rdma   the release's chart (helm install oci://...)
//	chart-version VERSION                  its version (helm --version)
//	chart-plain-http yes                   the registry speaks plain HTTP (helm --plain-http)
//	image HOST:PORT/PATH/kube-rdma:TAG     the image the chart's defaults name
//	image-digest sha256:...                the digest make release pushed for it (the index)
//
// With them, every install and upgrade of the working tree's chart goes through the registry and
// sets no image: the chart's defaults name it, and containerd pulls it by tag.

// registryChart reads the chart's reference from d into h; none named: the repository's chart
// directory stays.
func (h *helmConfig) registryChart(d map[string]string) error {
	ref, version := d["chart"], d["chart-version"]
	switch {
	case ref == "" && version == "":
		return nil
	case !strings.HasPrefix(ref, "oci://") || version == "":
		return fmt.Errorf("hook describe: chart %q with chart-version %q: want oci://... and a version", ref, version)
	}
	h.chart, h.chartArgs = ref, []string{"--version", version}
	if d["chart-plain-http"] == "yes" {
		h.chartArgs = append(h.chartArgs, "--plain-http")
	}
	return nil
}

// chartRef is helm's chart argument for chart: with the registry's flags when it is the
// working tree's chart from the registry.
func (h helmConfig) chartRef(chart string) []string {
	if chart == h.chart {
		return append([]string{chart}, h.chartArgs...)
	}
	return []string{chart}
}

// testImageFromRegistry: the daemon's container runs the image the chart's defaults name, pulled
// from the registry: its image is the release's tag and the runtime's image ID is the digest
// make release pushed (the image index, resolved by the tag).
func testImageFromRegistry(t *testing.T, e *env) {
	d, err := e.describe(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	image, digest := d["image"], d["image-digest"]
	if digest == "" {
		t.Skip("hook describe names no image-digest: the image was imported, not pulled from a registry")
	}
	repo := image[:strings.LastIndex(image, ":")]
	pods, err := e.core.Pods(e.helm.namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + e.helm.release})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != e.node || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Status.ContainerStatuses {
			n++
			want := repo + "@" + digest
			if c.Image != image {
				t.Errorf("pod %s container %s: image %q, want %q (the chart's default)", p.Name, c.Name, c.Image, image)
			}
			if c.ImageID != want {
				t.Errorf("pod %s container %s: image ID %q, want %q (the digest make release pushed)", p.Name, c.Name, c.ImageID, want)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no running container of release %s on %s", e.helm.release, e.node)
	}
	e.appendReport(t, fmt.Sprintf("image from the registry: %d containers of %s run %s (%s)", n, e.helm.release, image, digest))
}

func TestRegistryChart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		desc    map[string]string
		want    []string // chartRef of the chart
		wantErr bool
	}{
		{"none: the chart directory", map[string]string{}, []string{"/repo/chart"}, false},
		{"registry", map[string]string{"chart": "oci://127.0.0.1:5000/kube-rdma/charts/kube-rdma", "chart-version": "0.1.0-e2e"},
			[]string{"oci://127.0.0.1:5000/kube-rdma/charts/kube-rdma", "--version", "0.1.0-e2e"}, false},
		{"plain http", map[string]string{"chart": "oci://r/c", "chart-version": "1.0.0", "chart-plain-http": "yes"},
			[]string{"oci://r/c", "--version", "1.0.0", "--plain-http"}, false},
		{"no version", map[string]string{"chart": "oci://r/c"}, nil, true},
		{"not oci", map[string]string{"chart": "https://r/c.tgz", "chart-version": "1.0.0"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := helmConfig{chart: "/repo/chart"}
			err := h.registryChart(tc.desc)
			if (err != nil) != tc.wantErr {
				t.Fatalf("registryChart: %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, h.chartRef(h.chart)); diff != "" {
				t.Errorf("chartRef (-want +got):\n%s", diff)
			}
			if got := h.chartRef("/prev/chart"); !cmp.Equal(got, []string{"/prev/chart"}) {
				t.Errorf("chartRef of another chart = %v, want it alone", got)
			}
		})
	}
}
