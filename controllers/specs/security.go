package specs

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/bellows-kv/bellows/internal/contract"
)

// ImageUID is the non-root user of the bellows image (hack/image/ociimage.User).
const ImageUID = contract.ImageUID

// PodSecurityContext runs the stores and workers as the image's non-root user
// under the restricted Pod Security Standard. fsGroup makes a freshly
// provisioned volume (the stores' WAL PVC, root-owned on most provisioners)
// writable by that user.
func PodSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:        ptr.To(true),
		RunAsUser:           ptr.To(ImageUID),
		RunAsGroup:          ptr.To(ImageUID),
		FSGroup:             ptr.To(ImageUID),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// ContainerSecurityContext: nothing is written outside the mounted volumes.
func ContainerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}
