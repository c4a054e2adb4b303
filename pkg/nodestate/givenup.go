package nodestate

import (
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
)

// MaxGivenUp is the schema's bound of status.givenUp.
const MaxGivenUp = 32

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	command      = regexp.MustCompile(`^[A-Za-z]*$`)
	reason       = regexp.MustCompile(`^[a-z-]*$`)
)

// givenUp is status.givenUp: the give-ups as they came (newest first), at
// most MaxGivenUp, each field made to fit the schema, so that a record
// the plugin wrote oddly cannot fail the whole status's write: a pod name
// that is not one is left out, a device name has its unprintable runes
// replaced and is cut at its bound.
func givenUp(in []cniops.GiveUp) []v1alpha1.DeviceGivenUp {
	var out []v1alpha1.DeviceGivenUp
	for _, g := range in[:min(len(in), MaxGivenUp)] {
		d := v1alpha1.DeviceGivenUp{Time: metav1.NewTime(g.Time.UTC().Truncate(time.Second)),
			Device: printable(g.RDMA, 253), Netdev: printable(g.Netdev, 15), Function: printable(g.Function, 253)}
		if len(g.Command) <= 16 && command.MatchString(g.Command) {
			d.Command = g.Command
		}
		if len(g.Reason) <= 32 && reason.MatchString(g.Reason) {
			d.Reason = g.Reason
		}
		if len(g.PodNamespace) <= 63 && dnsLabel.MatchString(g.PodNamespace) && len(g.PodName) <= 253 && dnsSubdomain.MatchString(g.PodName) {
			d.Namespace, d.Pod = g.PodNamespace, g.PodName
		}
		out = append(out, d)
	}
	return out
}

// printable is s with the runes the schema's pattern refuses (C0 and C1
// controls, invalid UTF-8, zero-width and bidirectional marks) replaced by
// '?', cut to at most max bytes on a rune boundary.
func printable(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if refused(r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > max {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

func refused(r rune) bool {
	return r == utf8.RuneError || r <= 0x1f || (r >= 0x7f && r <= 0x9f) || (r >= 0x200b && r <= 0x200f) ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) || r == 0xfeff
}
