package dra

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	resourcev1beta1 "k8s.io/client-go/kubernetes/typed/resource/v1beta1"
	resourcev1beta2 "k8s.io/client-go/kubernetes/typed/resource/v1beta2"
	"k8s.io/client-go/rest"
)

// kubeClient is the part of kubernetes.Interface the kubeletplugin helper
// and its ResourceSlice controller use (k8s.io/dynamic-resource-allocation
// v0.37: client.New, resourceslice.StartController): the core group (the
// node's UID) and the resource groups. The helper's option takes the whole
// interface; the full Clientset would link every API group's client into
// the daemon, tens of MB for nothing. Any other group panics on the nil
// embedded interface; TestDriverAgainstAPIServer runs the helper on it.
type kubeClient struct {
	kubernetes.Interface // nil
	core                 corev1.CoreV1Interface
	resource             resourcev1.ResourceV1Interface
	resourceV1beta1      resourcev1beta1.ResourceV1beta1Interface
	resourceV1beta2      resourcev1beta2.ResourceV1beta2Interface
}

// NewKubeClient returns the client DriverConfig.KubeClient needs.
func NewKubeClient(rc *rest.Config) (kubernetes.Interface, error) {
	var c kubeClient
	var err error
	if c.core, err = corev1.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("core client: %w", err)
	}
	if c.resource, err = resourcev1.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("resource.k8s.io/v1 client: %w", err)
	}
	if c.resourceV1beta1, err = resourcev1beta1.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("resource.k8s.io/v1beta1 client: %w", err)
	}
	if c.resourceV1beta2, err = resourcev1beta2.NewForConfig(rc); err != nil {
		return nil, fmt.Errorf("resource.k8s.io/v1beta2 client: %w", err)
	}
	return c, nil
}

func (c kubeClient) CoreV1() corev1.CoreV1Interface             { return c.core }
func (c kubeClient) ResourceV1() resourcev1.ResourceV1Interface { return c.resource }
func (c kubeClient) ResourceV1beta1() resourcev1beta1.ResourceV1beta1Interface {
	return c.resourceV1beta1
}
func (c kubeClient) ResourceV1beta2() resourcev1beta2.ResourceV1beta2Interface {
	return c.resourceV1beta2
}
