package kubectlrdma

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// Execer runs a command in a pod's container and returns its stdout; doctor
// uses it for the checks that need the container's view.
type Execer interface {
	Exec(ctx context.Context, namespace, pod, container string, cmd []string) (string, error)
}

type kubeExecer struct {
	getter genericclioptions.RESTClientGetter
}

// NewExecer execs through the API server (pods/exec), as kubectl exec does:
// WebSocket first, SPDY when the server does not upgrade to it.
func NewExecer(g genericclioptions.RESTClientGetter) (Execer, error) {
	return kubeExecer{getter: g}, nil
}

func (k kubeExecer) Exec(ctx context.Context, namespace, pod, container string, cmd []string) (string, error) {
	cfg, err := k.getter.ToRESTConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return "", err
	}
	var out, errOut bytes.Buffer
	if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &errOut}); err != nil {
		if msg := strings.TrimSpace(errOut.String()); msg != "" {
			err = fmt.Errorf("%w (stderr: %s)", err, msg)
		}
		return out.String(), apiError(fmt.Sprintf("exec in pod %s/%s container %s", namespace, pod, container), err)
	}
	return out.String(), nil
}
