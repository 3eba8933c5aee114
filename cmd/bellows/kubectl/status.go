package kubectl

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
)

// Status is what `kubectl bellows status` shows: the cluster and its
// pool as the operator last saw them, their pods, and recent events.
type Status struct {
	Cluster *kvapi.KVCluster      `json:"cluster"`
	Pool    *kvapi.CompactionPool `json:"pool,omitempty"`
	// PoolMissing names the compactionPoolRef's pool when it does not exist.
	PoolMissing string       `json:"poolMissing,omitempty"`
	Stores      []corev1.Pod `json:"stores"`
	Workers     []corev1.Pod `json:"workers,omitempty"`
	// Events are those of the cluster, the pool and their objects (the
	// StatefulSet, Deployment, pods...), newest last.
	Events []corev1.Event `json:"events"`
	// FailingOver are the regions the Ready stores say are failing over
	// (FailingOver); RegionsUnread says why they could not be asked, when
	// they could not.
	FailingOver   []FailingOverRegion `json:"failingOver,omitempty"`
	RegionsUnread string              `json:"regionsUnread,omitempty"`
}

// FailingOverRegion is a region failing over: the store that owned it let
// its liveness lease run out, and no store has opened it since.
type FailingOverRegion struct {
	Region string `json:"region"`
	// From is the dead store's ordinal, Pod its pod.
	From string `json:"from"`
	Pod  string `json:"pod"`
}

// FailingOver asks every Ready storage pod of c for its regions (Regions)
// and returns those failing over, in key order.
func (k *Kube) FailingOver(ctx context.Context, c *kvapi.KVCluster) ([]FailingOverRegion, error) {
	regions, _, err := k.Regions(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []FailingOverRegion
	for _, r := range regions {
		if r.FailingOverFrom != "" {
			// A store's liveness name is its StatefulSet ordinal.
			out = append(out, FailingOverRegion{Region: r.Name, From: r.FailingOverFrom, Pod: c.Name + "-" + r.FailingOverFrom})
		}
	}
	return out, nil
}

// Status reads the status of the KVCluster name (empty: the only one in
// the namespace), keeping at most maxEvents events.
func (k *Kube) Status(ctx context.Context, name string, maxEvents int) (*Status, error) {
	c, err := k.Cluster(ctx, name)
	if err != nil {
		return nil, err
	}
	st := &Status{Cluster: c}
	if st.Pool, st.PoolMissing, err = k.Pool(ctx, c); err != nil {
		return nil, err
	}
	if st.Stores, err = k.StorePods(ctx, c); err != nil {
		return nil, err
	}
	if st.Pool != nil {
		if st.Workers, err = k.WorkerPods(ctx, st.Pool); err != nil {
			return nil, err
		}
	}
	if st.Events, err = k.Events(ctx, st); err != nil {
		return nil, err
	}
	if maxEvents >= 0 && len(st.Events) > maxEvents {
		st.Events = st.Events[len(st.Events)-maxEvents:]
	}
	return st, nil
}

// Events are the namespace's events about the cluster, its pool and what
// the operator made for them (all named after the cluster or the pool:
// CLUSTER, CLUSTER-0, POOL-7d9f-x2), oldest first.
func (k *Kube) Events(ctx context.Context, st *Status) ([]corev1.Event, error) {
	var list corev1.EventList
	if err := k.Client.List(ctx, &list, client.InNamespace(st.Cluster.Namespace)); err != nil {
		return nil, explainAPI(err, "events")
	}
	names := []string{st.Cluster.Name}
	if st.Pool != nil {
		names = append(names, st.Pool.Name)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if slices.ContainsFunc(names, func(n string) bool {
			return e.InvolvedObject.Name == n || strings.HasPrefix(e.InvolvedObject.Name, n+"-")
		}) {
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b corev1.Event) int { return EventTime(a).Compare(EventTime(b)) })
	return out, nil
}

// EventTime is when the event last happened, whichever API wrote it.
func EventTime(e corev1.Event) time.Time {
	if e.Series != nil && !e.Series.LastObservedTime.IsZero() {
		return e.Series.LastObservedTime.Time
	}
	for _, t := range []time.Time{e.LastTimestamp.Time, e.EventTime.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
		if !t.IsZero() {
			return t
		}
	}
	return time.Time{}
}
