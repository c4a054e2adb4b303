package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// controlPlane is etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager of the local-node build, on 127.0.0.1, state in
// dir, each under nice -n 19 (the machine is shared).
type controlPlane struct {
	dir, bin   string
	etcdURL    string
	apiURL     string
	token      string
	kubeconfig string
	procs      []*exec.Cmd
}

// nodeGrace is the controller manager's node-monitor-grace-period: a Node
// whose Lease is older turns NotReady. The simulator renews each Lease every
// leaseRenew (renewal.go says why it is not the kubelet's 10 s).
const nodeGrace = 10 * time.Minute

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startControlPlane(ctx context.Context, bin, dir string) (*controlPlane, error) {
	cp := &controlPlane{dir: dir, bin: bin}
	ports := make([]int, 3)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	cp.etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	cp.apiURL = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	if err := cp.files(); err != nil {
		return nil, err
	}
	if err := cp.start("etcd", "--name", "scale", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", cp.etcdURL, "--advertise-client-urls", cp.etcdURL,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "scale="+peer, "--quota-backend-bytes", "8589934592", "--unsafe-no-fsync",
		"--listen-metrics-urls", ""); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, cp.etcdURL+"/health", "", 30*time.Second); err != nil {
		return cp, fmt.Errorf("etcd: %w", err)
	}
	if err := cp.start("kube-apiserver", "--etcd-servers", cp.etcdURL, "--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[2]), "--cert-dir", filepath.Join(dir, "pki"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"), "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.key"), "--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/24", "--profiling=false", "--allow-privileged=true",
		// 127.0.0.1 may not be the kubernetes Service's endpoint: no reconciler.
		"--endpoint-reconciler-type", "none"); err != nil {
		return cp, err
	}
	if err := waitHTTP(ctx, cp.apiURL+"/readyz", cp.token, 90*time.Second); err != nil {
		return cp, fmt.Errorf("kube-apiserver: %w", err)
	}
	if err := cp.start("kube-controller-manager", "--kubeconfig", cp.kubeconfig,
		"--authentication-kubeconfig", cp.kubeconfig, "--authorization-kubeconfig", cp.kubeconfig,
		"--service-account-private-key-file", filepath.Join(dir, "sa.key"), "--leader-elect=false", "--secure-port", "0",
		"--profiling=false", "--node-monitor-grace-period", nodeGrace.String(),
		"--kube-api-qps", "200", "--kube-api-burst", "400"); err != nil {
		return cp, err
	}
	if err := cp.start("kube-scheduler", "--kubeconfig", cp.kubeconfig,
		"--authentication-kubeconfig", cp.kubeconfig, "--authorization-kubeconfig", cp.kubeconfig,
		"--leader-elect=false", "--secure-port", "0", "--profiling=false",
		"--kube-api-qps", "500", "--kube-api-burst", "1000"); err != nil {
		return cp, err
	}
	return cp, nil
}

// files writes the admin token, the service account key and a kubeconfig.
func (cp *controlPlane) files() error {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return fmt.Errorf("token: %w", err)
	}
	cp.token = hex.EncodeToString(b)
	if err := os.MkdirAll(filepath.Join(cp.dir, "logs"), 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cp.dir, "tokens.csv"),
		[]byte(cp.token+",scale-admin,scale-admin,system:masters\n"), 0o600); err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(cp.dir, "sa.key"), pemKey, 0o600); err != nil {
		return fmt.Errorf("service account key: %w", err)
	}
	cp.kubeconfig = filepath.Join(cp.dir, "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: scale
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: scale
  context: {cluster: scale, user: admin}
current-context: scale
`, cp.apiURL, cp.token)
	if err := os.WriteFile(cp.kubeconfig, []byte(kc), 0o600); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	return nil
}

func (cp *controlPlane) start(name string, args ...string) error {
	log, err := os.Create(filepath.Join(cp.dir, "logs", name+".log"))
	if err != nil {
		return fmt.Errorf("%s log: %w", name, err)
	}
	defer func() { _ = log.Close() }()
	cmd := exec.Command("nice", append([]string{"-n", "19", filepath.Join(cp.bin, name)}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	cp.procs = append(cp.procs, cmd)
	return nil
}

// stop ends the processes it started, last first.
func (cp *controlPlane) stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

// rest is a client config for the admin: QPS high enough that the
// simulator's own rate limiter is not what gets measured.
func (cp *controlPlane) rest() *rest.Config {
	return &rest.Config{Host: cp.apiURL, BearerToken: cp.token, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS: 2000, Burst: 4000, Timeout: 60 * time.Second}
}

func waitHTTP(ctx context.Context, url, token string, within time.Duration) error {
	c := &http.Client{Timeout: 5 * time.Second, Transport: insecureTransport()}
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %s: %w", within, last)
}
