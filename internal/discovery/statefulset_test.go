package discovery

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bellows-kv/bellows/internal/contract"
)

// The replica count follows the StatefulSet's spec.replicas through a
// watch: a scale is seen without a restart.
func TestStatefulSetReplicasFollowsScaling(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kv-store"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr(int32(3))}}
	cs := fake.NewClientset(sts)
	r, err := StartStatefulSetReplicasWith(ctx, cs, "ns", "kv-store")
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := r.Replicas(); !ok || n != 3 {
		t.Fatalf("Replicas() = %d, %v, want 3", n, ok)
	}
	for _, want := range []int32{2, 3} {
		sts = sts.DeepCopy()
		sts.Spec.Replicas = ptr(want)
		if _, err := cs.AppsV1().StatefulSets("ns").Update(ctx, sts, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			n, _ := r.Replicas()
			return n == int(want), nil
		}); err != nil {
			n, _ := r.Replicas()
			t.Fatalf("Replicas() = %d, want %d", n, want)
		}
	}
	if err := cs.AppsV1().StatefulSets("ns").Delete(ctx, "kv-store", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, ok := r.Replicas()
		return !ok, nil
	}); err != nil {
		t.Fatal("a deleted StatefulSet still has a replica count")
	}
}

func TestHostnamesAreTheReadyPods(t *testing.T) {
	named := func(host string, ready, terminating bool) discoveryv1.Endpoint {
		e := ep("10.0.0.1", ready, terminating)
		e.Hostname = ptr(host)
		return e
	}
	byRef := ep("10.0.0.9", true, false)
	byRef.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "kv-store-4"}
	// publishNotReadyAddresses: ready, but the pod is not Ready (serving
	// false).
	starting := named("kv-store-5", true, false)
	starting.Conditions.Serving = ptr(false)
	serving := named("kv-store-6", true, false)
	serving.Conditions.Serving = ptr(true)
	got := Hostnames([]*discoveryv1.EndpointSlice{slice("a", 7400,
		named("kv-store-1", true, false), named("kv-store-0", true, false),
		named("kv-store-2", false, false), named("kv-store-3", true, true), byRef, starting, serving)})
	if want := []string{"kv-store-0", "kv-store-1", "kv-store-4", "kv-store-6"}; !slices.Equal(got, want) {
		t.Fatalf("Hostnames = %v, want %v", got, want)
	}
}

// Serving follows the operator's serving-replicas mark: its value when it
// is a whole number from 1 to spec.replicas, else spec.replicas (a
// malformed mark drains nothing).
func TestServingFollowsTheDrainMark(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "kv-store"}, Spec: appsv1.StatefulSetSpec{Replicas: ptr(int32(5))}}
	cs := fake.NewClientset(sts)
	r, err := StartStatefulSetReplicasWith(ctx, cs, "ns", "kv-store")
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := r.Serving(); !ok || m != 5 {
		t.Fatalf("Serving() = %d, %v without a mark, want 5", m, ok)
	}
	for _, c := range []struct {
		mark string
		want int
	}{{"3", 3}, {"5", 5}, {"three", 5}, {"0", 5}, {"-1", 5}, {"6", 5}, {"", 5}, {"4", 4}} {
		sts = sts.DeepCopy()
		sts.Annotations = map[string]string{contract.ServingReplicasAnnotation: c.mark}
		if _, err := cs.AppsV1().StatefulSets("ns").Update(ctx, sts, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Wait for the informer to see this version, then read the mark.
		rv := sts.ResourceVersion
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got, err := r.lister.Get("kv-store")
			return err == nil && got.Annotations[contract.ServingReplicasAnnotation] == c.mark && got.ResourceVersion == rv, nil
		}); err != nil {
			t.Fatalf("the informer did not see the mark %q", c.mark)
		}
		if m, ok := r.Serving(); !ok || m != c.want {
			t.Errorf("Serving() = %d, %v with the mark %q, want %d", m, ok, c.mark, c.want)
		}
		if n, _ := r.Replicas(); n != 5 {
			t.Errorf("Replicas() = %d with the mark %q, want 5", n, c.mark)
		}
	}
}
