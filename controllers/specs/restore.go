package specs

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// RestoreJobName is the name of c's restore Job.
func RestoreJobName(c *kvapi.KVCluster) string { return c.Name + "-restore" }

// restoreBackoffLimit: a restore that failed before it wrote anything (the
// source bucket unreachable) may succeed again; one that failed after
// refuses the non-empty target at once, saying so.
const restoreBackoffLimit = 2

// restoreArgs is bellows restore of c's recovery: a backup, or the state at
// a target time.
func restoreArgs(c *kvapi.KVCluster) []string {
	r := c.Spec.Bootstrap.Recovery
	args := []string{"restore", "--from", r.SourceBucketURL}
	if r.TargetTime != "" {
		args = append(args, "--time", r.TargetTime)
	} else {
		args = append(args, "--backup", r.Backup)
	}
	return append(args, "--to", c.Spec.Bucket.URL)
}

// BuildRestoreJob is the Job that restores c's spec.bootstrap.recovery
// backup into c's bucket (bellows restore), before the StatefulSet exists.
// It runs as the storage pods do (image, pull policy, bucket credentials,
// restricted security context); nil when c has no recovery.
func BuildRestoreJob(c *kvapi.KVCluster) *batchv1.Job {
	if c.Spec.Bootstrap == nil || c.Spec.Bootstrap.Recovery == nil {
		return nil
	}
	var envFrom []corev1.EnvFromSource
	if ref := c.Spec.Bucket.CredentialsSecretRef; ref != nil {
		envFrom = append(envFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: *ref}})
	}
	meta := clusterMeta(c, RestoreJobName(c))
	meta.Labels = CommonLabels(c.Name, contract.ComponentRestore)
	return &batchv1.Job{
		ObjectMeta: meta,
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(restoreBackoffLimit)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: CommonLabels(c.Name, contract.ComponentRestore)},
				Spec: corev1.PodSpec{
					RestartPolicy:   corev1.RestartPolicyNever,
					SecurityContext: PodSecurityContext(),
					// bellows restore reads and writes buckets, never the API
					// server: the default ServiceAccount, without its token.
					AutomountServiceAccountToken: ptr.To(false),
					Containers: []corev1.Container{{
						Name:            "restore",
						Image:           c.Spec.Image,
						ImagePullPolicy: c.Spec.ImagePullPolicy,
						Args:            restoreArgs(c),
						EnvFrom:         envFrom,
						SecurityContext: ContainerSecurityContext(),
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
							// A restore streams one file at a time.
							Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
						},
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
					}},
				},
			},
		},
	}
}
