package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of this package.
var GroupVersion = schema.GroupVersion{Group: "rdma.kube-rdma.io", Version: "v1alpha1"}

// SchemeGroupVersion is GroupVersion under the name the generated client
// (pkg/client, client-gen) looks for.
var SchemeGroupVersion = GroupVersion

// Resource is the plural resource name of RDMANodeState.
const Resource = "rdmanodestates"

// SchemeBuilder adds this package's types to a scheme.
var (
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	AddToScheme   = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &RDMANodeState{}, &RDMANodeStateList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
