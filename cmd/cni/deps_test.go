package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLinksNeitherGRPCNorHTTP: the plugin is exec'd for every ADD and DEL,
// and grpc-go's, protobuf's and net/http's initialization cost more than
// the rest of its start-up (docs/cni.md, Build). No protobuf package at
// all: even encoding/protowire brings one whose init hashes the executable.
func TestLinksNeitherGRPCNorHTTP(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go tool to list the plugin's packages")
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, bad := range []string{"google.golang.org/grpc", "google.golang.org/protobuf/proto", "net/http"} {
		if slices.Contains(deps, bad) {
			t.Errorf("the plugin links %s", bad)
		}
	}
	for _, d := range deps {
		if strings.HasPrefix(d, "google.golang.org/protobuf/") {
			t.Errorf("the plugin links %s", d)
		}
		// DRA mode reads the claims' records through pkg/hostapi/claimrecord;
		// pkg/dra itself links client-go.
		// PodResources through podresources.H2Client: neither the
		// upstream API nor the daemon's grpc-go client.
		if strings.HasPrefix(d, "k8s.io/client-go") || d == "github.com/kube-rdma/kube-rdma/pkg/dra" ||
			strings.HasPrefix(d, "k8s.io/kubelet") || strings.HasPrefix(d, "github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/grpcclient") {
			t.Errorf("the plugin links %s", d)
		}
	}
}
