//go:build tools

// Package tools names the commands of the Multus thick plugin that e2e/local-node/build.sh
// builds, so that `go mod tidy` records their dependencies. It is never compiled.
package tools

import (
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/install_multus"
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus-daemon"
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/multus-shim"
	_ "gopkg.in/k8snetworkplumbingwg/multus-cni.v4/cmd/passthru-cni"
)
