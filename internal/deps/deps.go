// Package deps pins module dependencies that the packages being written will import; it is removed once they do.
package deps

import (
	_ "github.com/containernetworking/cni/pkg/skel"
	_ "github.com/containernetworking/cni/pkg/types/100"
	_ "github.com/containernetworking/cni/pkg/version"
	_ "github.com/containernetworking/plugins/pkg/ipam"
	_ "github.com/containernetworking/plugins/pkg/ns"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "golang.org/x/sys/unix"
	_ "google.golang.org/grpc"
	_ "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	_ "k8s.io/kubelet/pkg/apis/podresources/v1"
	_ "sigs.k8s.io/yaml"
	_ "tags.cncf.io/container-device-interface/specs-go"
)
