package cnireclaim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/cni"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// ExecRestorer runs the restore of the CNI plugin installed on the node
// (`kube-rdma reclaim`, its binary in the CNI bin directory) rather than the
// daemon's linked copy: the node's attachment records are the installed
// plugin's, which during an update or after a rollback is another release
// than the daemon's, so the restore is always the code that wrote them.
// ReturnedByKernel, a read-only check, is Checker's.
//
// A binary that cannot reclaim (missing, or a release without the command)
// fails every key of the pass: the records stay for the next pass, DEL or
// GC, and the error says why.
type ExecRestorer struct {
	// Binary is the installed plugin (<cni-bin-dir>/kube-rdma).
	Binary string
	// ReturnWait bounds the wait for a NIC the kernel has not returned
	// yet, in each run.
	ReturnWait time.Duration
	// Timeout bounds one run; 0 is 2 min.
	Timeout time.Duration
	// Stderr receives the plugin's logs; nil drops them.
	Stderr  io.Writer
	Checker interface {
		ReturnedByKernel(rec attachment.Attachment) bool
	}
}

// ReturnedByKernel implements Restorer.
func (r ExecRestorer) ReturnedByKernel(rec attachment.Attachment) bool {
	return r.Checker.ReturnedByKernel(rec)
}

// execResult is a line of `kube-rdma reclaim`'s output.
type execResult struct {
	ContainerID string             `json:"containerID"`
	IfName      string             `json:"ifName"`
	Pod         *attachment.PodRef `json:"pod"`
	Skipped     string             `json:"skipped"`
	Error       string             `json:"error"`
}

// Reclaim implements Restorer.
func (r ExecRestorer) Reclaim(ctx context.Context, opts cni.ReclaimOpts, keys []attachment.Key) []cni.ReclaimResult {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"reclaim", "--state-dir", opts.Store.Dir, "--boot-id", opts.Store.BootID, "--cni-path", opts.CNIPath,
		"--return-wait", r.ReturnWait.String()}
	if opts.SysfsRoot != "" {
		args = append(args, "--sysfs-root", opts.SysfsRoot)
	}
	for _, k := range keys {
		args = append(args, k.ContainerID+"/"+k.IfName)
	}
	cmd := exec.CommandContext(ctx, r.Binary, args...)
	var out, stderr bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	if r.Stderr != nil {
		_, _ = r.Stderr.Write(stderr.Bytes())
	}
	got := map[attachment.Key]cni.ReclaimResult{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var x execResult
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			continue
		}
		k := attachment.Key{ContainerID: x.ContainerID, IfName: x.IfName}
		res := cni.ReclaimResult{Key: k, Pod: x.Pod, Skipped: x.Skipped}
		if x.Error != "" {
			res.Err = errors.New(x.Error)
		}
		got[k] = res
	}
	res := make([]cni.ReclaimResult, 0, len(keys))
	for _, k := range keys {
		x, ok := got[k]
		if !ok {
			why := "it printed no result for it"
			if runErr != nil {
				why = fmt.Sprintf("%v: %s", runErr, lastLine(stderr.Bytes()))
			}
			x = cni.ReclaimResult{Key: k, Err: fmt.Errorf("the installed CNI plugin %s did not reclaim the attachment (an older release without `reclaim`?): %s", r.Binary, why)}
		}
		res = append(res, x)
	}
	return res
}

// lastLine is the last non-empty line of b, at most 512 bytes of it.
func lastLine(b []byte) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	l := lines[len(lines)-1]
	if len(l) > 512 {
		l = l[:512]
	}
	return string(l)
}
