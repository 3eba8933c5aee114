//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/internal/contract"
)

// missingImage is not on the node, and the samples' pull policy is Never:
// the kubelet refuses at once (ErrImageNeverPull), with no registry to ask.
const missingImage = "bellows.test/bellows:does-not-exist"

// imageFailures are the waiting reasons of a container whose image cannot
// be had.
var imageFailures = map[string]bool{"ErrImageNeverPull": true, "ErrImagePull": true, "ImagePullBackOff": true}

// 11. The KVCluster's image is set to one that does not exist, then set
// back. The StatefulSet replaces its highest pod, which cannot start, and
// goes no further; it would not replace that pod with the corrected
// template either (kubernetes/kubernetes#67250). The operator does: the
// cluster is Ready again with every storage pod on the good image, the pods
// that never broke are the same pods, and every acknowledged write reads
// back.
func (e *env) badImageRollout(t *testing.T, kv *kvClient, l *ledger) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	kvc := &kvapi.KVCluster{}
	key := client.ObjectKey{Namespace: ns, Name: clusterName}
	if err := e.c.Get(ctx, key, kvc); err != nil {
		t.Fatal(err)
	}
	// The samples name no image (the operator's own runs); set back is
	// unset again.
	pinned := kvc.Spec.Image
	good := cmp.Or(pinned, upgradeImage) // scenario 9 upgraded the operator
	write(t, ctx, kv, l, "bad-image", 50, 200)
	before := map[string]types.UID{}
	for _, p := range e.pods(t, contract.ComponentStore, clusterName) {
		before[p.Name] = p.UID
	}
	setImage := func(image string) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"image":%q}}`, image)
		if image == "" {
			patch = `{"spec":{"image":null}}`
		}
		if err := e.c.Patch(ctx, &kvapi.KVCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: clusterName}},
			client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatalf("patch KVCluster %s: %v", patch, err)
		}
	}

	setImage(missingImage)
	var stuck string
	eventually(t, 3*time.Minute, "a storage pod stuck on the missing image", func(ctx context.Context) (bool, string, error) {
		var states []string
		for _, p := range e.pods(t, contract.ComponentStore, clusterName) {
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil {
					states = append(states, p.Name+": "+w.Reason)
					if imageFailures[w.Reason] && p.Spec.Containers[0].Image == missingImage {
						stuck = p.Name
					}
				}
			}
		}
		return stuck != "", strings.Join(states, ", "), nil
	})
	eventually(t, time.Minute, "the KVCluster to report the stuck rollout", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, key, kvc); err != nil {
			return false, "", err
		}
		p := meta.FindStatusCondition(kvc.Status.Conditions, kvapi.ConditionProgressing)
		if p == nil {
			return false, "no Progressing condition", nil
		}
		return p.Status == metav1.ConditionFalse && p.Reason == kvapi.ReasonRolloutStuck && strings.Contains(p.Message, stuck),
			fmt.Sprintf("Progressing=%s %s: %s", p.Status, p.Reason, p.Message), nil
	})

	setImage(pinned)
	eventually(t, 4*time.Minute, "the KVCluster Ready with every storage pod Ready on the good image", func(ctx context.Context) (bool, string, error) {
		if err := e.c.Get(ctx, key, kvc); err != nil {
			return false, "", err
		}
		r := meta.FindStatusCondition(kvc.Status.Conditions, kvapi.ConditionReady)
		pods := e.pods(t, contract.ComponentStore, clusterName)
		var states []string
		ok := int32(len(pods)) == kvc.Spec.Replicas
		for _, p := range pods {
			image := p.Spec.Containers[0].Image
			states = append(states, fmt.Sprintf("%s %s ready=%t", p.Name, image, podReady(&p)))
			ok = ok && image == good && podReady(&p)
		}
		ok = ok && r != nil && r.Status == metav1.ConditionTrue && r.ObservedGeneration == kvc.Generation
		return ok, strings.Join(states, ", ") + "; " + condString(r), nil
	})
	for _, p := range e.pods(t, contract.ComponentStore, clusterName) {
		if p.Name != stuck && before[p.Name] != "" && p.UID != before[p.Name] {
			t.Errorf("pod %s, which never ran the missing image, was replaced", p.Name)
		}
	}
	var evs eventsv1.EventList
	if err := e.c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	replaced := false
	for _, ev := range evs.Items {
		if ev.Regarding.UID == kvc.UID && ev.Reason == kvapi.ReasonRolloutReplaced && strings.Contains(ev.Note, "deleted "+stuck) {
			replaced = true
			t.Logf("event: %s %s: %s", ev.Type, ev.Reason, ev.Note)
		}
	}
	if !replaced {
		t.Errorf("no %s event says that %s was deleted", kvapi.ReasonRolloutReplaced, stuck)
	}
	verifyLedger(t, ctx, kv, l)
}
