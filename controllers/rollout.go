package controllers

// A stuck rollout, and how a newer spec replaces it.
//
// The storage pods roll one at a time (OrderedReady), and the StatefulSet
// controller never replaces a pod that is not Ready: a rollout whose new pod
// cannot start (an image that does not exist, a crash at start-up) blocks its
// own fix (kubernetes/kubernetes#67250; the Kubernetes documentation's
// "forced rollback" asks a person to delete the pod). The operator's rollout
// gate would block it a second time, holding the fix back until the broken
// rollout completes. So:
//
//   - A pod is stuck when it is not Ready, not being deleted, and either a
//     container waits for a reason that does not clear without a change to
//     the pod (hopelessWaiting), or it has not been Ready for
//     contract.RolloutProgressDeadline.
//   - The rollout is stuck when the StatefulSet controller has observed the
//     StatefulSet's latest spec and a pod at its update revision is stuck. A
//     newer spec then passes the gate (kvcluster_controller.go).
//   - A pod that is stuck and at another revision than the update revision
//     of a StatefulSet whose latest spec the controller has observed is
//     superseded: the operator deletes it, and the StatefulSet controller
//     recreates it from the update revision. This is what the controller
//     itself does to a Ready pod during a rollout. A pod below the rolling
//     update's partition is never superseded: it would be recreated at the
//     current revision, as stuck as before.
//
// Invariants: the operator deletes only pods the StatefulSet controls, and
// of those only superseded ones; never a Ready pod, never one at the update
// revision (it would come back the same), never one that changed since it
// was judged (the delete is preconditioned on its UID and resourceVersion).

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bellows-kv/bellows/internal/contract"
)

// hopelessWaiting maps the reasons the kubelet gives for a waiting container
// that do not clear without a change to the pod to a description that stays
// the same while the kubelet alternates between them (ErrImagePull and
// ImagePullBackOff), so a condition built from it does not flap.
var hopelessWaiting = map[string]string{
	"ErrImagePull":               "its image cannot be pulled",
	"ImagePullBackOff":           "its image cannot be pulled",
	"ErrImageNeverPull":          "its image is not on the node and may not be pulled",
	"InvalidImageName":           "its image name is invalid",
	"CrashLoopBackOff":           "it crash-loops",
	"CreateContainerConfigError": "its container cannot be configured",
	"CreateContainerError":       "its container cannot be created",
}

// stuckPod is a pod judged stuck, with what it was judged on.
type stuckPod struct {
	pod      *corev1.Pod
	revision string
	// class says why in words that do not change from pass to pass (for
	// the condition); detail adds the kubelet's reason and message (for the
	// event of a deletion).
	class, detail string
}

func (s stuckPod) String() string {
	return fmt.Sprintf("%s (revision %s: %s)", s.pod.Name, s.revision, s.detail)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// isStuck judges one pod at now (see the top of the file).
func isStuck(p *corev1.Pod, now time.Time) (class, detail string, stuck bool) {
	if p.DeletionTimestamp != nil || podReady(p) {
		return "", "", false
	}
	for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		if class, ok := hopelessWaiting[w.Reason]; ok {
			class = fmt.Sprintf("container %s: %s", cs.Name, class)
			detail := fmt.Sprintf("container %s waiting: %s", cs.Name, w.Reason)
			if w.Message != "" {
				detail += ": " + truncate(w.Message, 200)
			}
			return class, detail, true
		}
	}
	since := p.CreationTimestamp.Time
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && !c.LastTransitionTime.IsZero() {
			since = c.LastTransitionTime.Time
		}
	}
	if now.Sub(since) < contract.RolloutProgressDeadline {
		return "", "", false
	}
	class = fmt.Sprintf("not Ready since %s, longer than %s", since.UTC().Format(time.RFC3339), contract.RolloutProgressDeadline)
	return class, class, true
}

// maxEventNote keeps an event's note under the API server's limit (1 kB)
// however many pods it names.
const maxEventNote = 1000

// truncate cuts s to n bytes and marks the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// observedRevision is the StatefulSet's update revision once its
// controller has observed the latest spec, and "" before: until then the
// status describes an older spec, and nothing is judged on it.
func observedRevision(sts *appsv1.StatefulSet) string {
	if sts.Status.ObservedGeneration < sts.Generation {
		return ""
	}
	return sts.Status.UpdateRevision
}

// rolloutPods are the StatefulSet's stuck pods: those at its update revision
// (the rollout is stuck on them) and the superseded ones (to be replaced).
type rolloutPods struct {
	updateRevision    string
	stuck, superseded []stuckPod
}

// judgePods lists the pods the StatefulSet controls, live (a cached pod
// could look stuck after it became Ready), and judges them at now.
func judgePods(ctx context.Context, c client.Reader, sts *appsv1.StatefulSet, now time.Time) (rolloutPods, error) {
	out := rolloutPods{updateRevision: observedRevision(sts)}
	if out.updateRevision == "" || sts.Spec.Selector == nil {
		return out, nil
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(sts.Namespace), client.MatchingLabels(sts.Spec.Selector.MatchLabels)); err != nil {
		return out, fmt.Errorf("list the pods of StatefulSet %s: %w", sts.Name, err)
	}
	partition := 0
	if ru := sts.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		partition = int(*ru.Partition)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !metav1.IsControlledBy(p, sts) {
			continue
		}
		class, detail, stuck := isStuck(p, now)
		if !stuck {
			continue
		}
		s := stuckPod{pod: p, revision: p.Labels[appsv1.StatefulSetRevisionLabel], class: class, detail: detail}
		ordinal, err := strconv.Atoi(strings.TrimPrefix(p.Name, sts.Name+"-"))
		switch {
		case s.revision == out.updateRevision:
			out.stuck = append(out.stuck, s)
		case err == nil && ordinal >= partition:
			out.superseded = append(out.superseded, s)
		}
	}
	return out, nil
}

// stuckMessage describes a stuck rollout in words that stay the same from
// pass to pass.
func (rp rolloutPods) stuckMessage() string {
	var parts []string
	for _, s := range rp.stuck {
		parts = append(parts, fmt.Sprintf("pod %s (%s)", s.pod.Name, s.class))
	}
	return fmt.Sprintf("the rollout of revision %s is stuck on %s: the StatefulSet does not replace a pod that is not Ready; "+
		"a newer spec of the KVCluster replaces it", rp.updateRevision, strings.Join(parts, ", "))
}

// stuckDetail names the pods the rollout is stuck on, with the kubelet's
// reasons (for an event or a one-time message).
func (rp rolloutPods) stuckDetail() string {
	var parts []string
	for _, s := range rp.stuck {
		parts = append(parts, s.String())
	}
	return fmt.Sprintf("the rollout of revision %s, stuck on pod %s", rp.updateRevision, strings.Join(parts, ", pod "))
}

// replaceSuperseded deletes the superseded stuck pods so that the
// StatefulSet controller recreates them from the update revision, and
// returns what it deleted. A pod that is gone or changed since it was
// judged is skipped: the next pass judges it again.
func replaceSuperseded(ctx context.Context, c client.Client, sts *appsv1.StatefulSet, rp rolloutPods) ([]stuckPod, error) {
	var deleted []stuckPod
	for _, s := range rp.superseded {
		uid, rv := s.pod.UID, s.pod.ResourceVersion
		err := c.Delete(ctx, s.pod, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("delete pod %s, stuck on superseded revision %s of StatefulSet %s: %w", s.pod.Name, s.revision, sts.Name, err)
		}
		deleted = append(deleted, s)
	}
	return deleted, nil
}

// replacedMessage says which pods were deleted and why.
func replacedMessage(sts *appsv1.StatefulSet, updateRevision string, deleted []stuckPod) string {
	var parts []string
	for _, s := range deleted {
		parts = append(parts, s.String())
	}
	return fmt.Sprintf("deleted %s, not Ready on a superseded revision, so that StatefulSet %s recreates them at revision %s",
		strings.Join(parts, ", "), sts.Name, updateRevision)
}
