package controllers

// A scale-down drains the leaving stores first (docs/regions.md §5).
//
// When spec.replicas M is below the StatefulSet's replicas N, the operator
// does not shrink it at once: it keeps N and marks the ordinals M … N-1 as
// leaving (contract.ServingReplicasAnnotation, with the time the drain
// began in contract.DrainingSinceAnnotation). The stores' balancer sees the
// mark through its watch of the StatefulSet and moves every region off the
// leaving stores, within its moves-in-flight budget, each a planned
// handover. The operator asks each leaving pod how many regions it still
// holds (StoreGauges) and shrinks the StatefulSet to M, removing the
// mark, once none holds any. A leaving pod that is not Ready is drained as
// far as the operator can tell: the balancer cannot move regions off a
// store that does not answer, and its regions fall back to their slots'
// stores after the shrink, as they did before drains existed. The whole
// drain is bounded by contract.StoreDrainTimeout, after which the operator
// shrinks anyway and says so with a Warning event.
//
// Why a drain at all: without it, a leaving pod releases its regions on
// SIGTERM, racing its termination grace period, and every region of a
// leaving store is unavailable at once while the survivors claim them. A
// drain is one planned, bounded move per region.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// StoreGauges reads what a Ready storage pod's metrics say of its regions.
type StoreGauges interface {
	// RegionsHeld is how many regions the pod holds.
	RegionsHeld(ctx context.Context, c *kvapi.KVCluster, pod *corev1.Pod) (int, error)
	// RegionsWithoutLiveOwner is how many regions the pod's balancer last
	// found given to a store whose liveness lease ran out (0 at a store
	// that does not hold the balancer's lease).
	RegionsWithoutLiveOwner(ctx context.Context, c *kvapi.KVCluster, pod *corev1.Pod) (int, error)
}

// metricsStoreGauges reads a pod's /metrics. The operator already scrapes
// the storage pods' metrics port for the autoscaler, so the NetworkPolicy
// and the certificates admit it there; a gRPC call would need the KV port
// and a store certificate's name.
type metricsStoreGauges struct {
	certs certificates
	creds *operatorCredentials
}

// RegionsHeld counts the regions the pod serves and the ones assigned to
// it that it has not claimed yet.
func (m *metricsStoreGauges) RegionsHeld(ctx context.Context, c *kvapi.KVCluster, pod *corev1.Pod) (int, error) {
	metrics, err := m.gauges(ctx, c, pod, contract.MetricStoreRegions)
	if err != nil {
		return 0, err
	}
	return int(metrics[contract.MetricStoreRegions] + metrics[contract.MetricStoreRegionsWaiting]), nil
}

// RegionsWithoutLiveOwner implements StoreGauges.
func (m *metricsStoreGauges) RegionsWithoutLiveOwner(ctx context.Context, c *kvapi.KVCluster, pod *corev1.Pod) (int, error) {
	metrics, err := m.gauges(ctx, c, pod, contract.MetricRegionsWithoutLiveOwner)
	if err != nil {
		return 0, err
	}
	return int(metrics[contract.MetricRegionsWithoutLiveOwner]), nil
}

// gauges is pod's metrics, which must export required.
func (m *metricsStoreGauges) gauges(ctx context.Context, c *kvapi.KVCluster, pod *corev1.Pod, required string) (map[string]float64, error) {
	metrics, url, err := m.scrape(ctx, c, pod)
	if err != nil {
		return nil, err
	}
	if _, ok := metrics[required]; !ok {
		return nil, fmt.Errorf("%s does not export %s", url, required)
	}
	return metrics, nil
}

// scrape reads pod's metrics, over TLS with the operator's monitoring
// certificate when the pod serves TLS.
func (m *metricsStoreGauges) scrape(ctx context.Context, c *kvapi.KVCluster, pod *corev1.Pod) (map[string]float64, string, error) {
	if pod.Status.PodIP == "" {
		return nil, "", fmt.Errorf("pod %s has no IP", pod.Name)
	}
	scheme, hc := "http", &http.Client{Timeout: 5 * time.Second}
	if specs.PodServesTLS(pod) {
		cfg, err := m.creds.forMode(ctx, m.certs, c.Namespace, c.Spec.TLS.Mode, kvapi.MonitoringTLSSecretName)
		if err != nil {
			return nil, "", fmt.Errorf("the operator's client certificate: %w", err)
		}
		tr := &http.Transport{TLSClientConfig: cfg}
		defer tr.CloseIdleConnections()
		scheme, hc = "https", &http.Client{Timeout: hc.Timeout, Transport: tr}
	}
	url := fmt.Sprintf("%s://%s:%d/metrics", scheme, pod.Status.PodIP, contract.MetricsPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, url, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, url, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, url, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	metrics, err := autoscaler.ParseMetrics(resp.Body)
	if err != nil {
		return nil, url, fmt.Errorf("GET %s: %w", url, err)
	}
	return metrics, url, nil
}

// drainState is what a pass found of a scale-down's drain.
type drainState struct {
	// from is the StatefulSet's replicas, to the cluster's.
	from, to int32
	since    time.Time
	// marked: the StatefulSet carried the mark for to when the pass began,
	// so the stores may have acted on it; until then nothing is judged.
	marked bool
	// held are the leaving Ready pods that hold regions, by name;
	// unanswered those that did not say (why); notReady those not Ready.
	held       map[string]int
	unanswered map[string]string
	notReady   []string
	timedOut   bool
}

// done reports whether the StatefulSet may shrink now.
func (d *drainState) done() bool {
	return d.timedOut || (d.marked && len(d.held) == 0 && len(d.unanswered) == 0)
}

// leaving names the leaving ordinals, "3, 4".
func (d *drainState) leaving() string {
	var out []string
	for o := d.to; o < d.from; o++ {
		out = append(out, strconv.Itoa(int(o)))
	}
	return strings.Join(out, ", ")
}

// message says what the drain waits for.
func (d *drainState) message() string {
	msg := fmt.Sprintf("draining stores %s before scaling from %d to %d (at most until %s)", d.leaving(), d.from, d.to,
		d.since.Add(contract.StoreDrainTimeout).UTC().Format(time.RFC3339))
	if !d.marked {
		return msg + ": marking them as leaving"
	}
	var parts []string
	for _, name := range sortedKeys(d.held) {
		parts = append(parts, fmt.Sprintf("%s holds %d regions", name, d.held[name]))
	}
	for _, name := range sortedKeys(d.unanswered) {
		parts = append(parts, fmt.Sprintf("%s did not answer (%s)", name, d.unanswered[name]))
	}
	return msg + ": " + strings.Join(parts, "; ")
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// judgeDrain looks at a scale-down of the live StatefulSet sts to the
// cluster's replicas at now: whether the stores saw the mark, and which
// leaving pods still hold regions.
func (r *KVClusterReconciler) judgeDrain(ctx context.Context, c *kvapi.KVCluster, sts *appsv1.StatefulSet, now time.Time) (*drainState, error) {
	d := &drainState{from: *sts.Spec.Replicas, to: c.Spec.Replicas, since: now,
		held: map[string]int{}, unanswered: map[string]string{}}
	ann := sts.GetAnnotations()
	if v, ok := ann[contract.DrainingSinceAnnotation]; ok {
		// A drain under way keeps its start (also when the target
		// changes mid-way: the bound is on the whole scale-down).
		if t, err := time.Parse(time.RFC3339, v); err == nil && !t.After(now) {
			d.since = t
		} else {
			log.FromContext(ctx).Info("ignoring a malformed drain start: the drain starts now", "annotation", contract.DrainingSinceAnnotation, "value", v)
		}
	}
	d.marked = ann[contract.ServingReplicasAnnotation] == strconv.Itoa(int(d.to))
	if !d.marked {
		return d, nil
	}
	if now.Sub(d.since) >= contract.StoreDrainTimeout {
		d.timedOut = true
		return d, nil
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(sts.Namespace), client.MatchingLabels(sts.Spec.Selector.MatchLabels)); err != nil {
		return nil, fmt.Errorf("list the pods of StatefulSet %s: %w", sts.Name, err)
	}
	byName := map[string]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; metav1.IsControlledBy(p, sts) {
			byName[p.Name] = p
		}
	}
	for o := d.to; o < d.from; o++ {
		name := fmt.Sprintf("%s-%d", sts.Name, o)
		pod, ok := byName[name]
		if !ok || !pod.DeletionTimestamp.IsZero() || !podReady(pod) {
			d.notReady = append(d.notReady, name)
			continue
		}
		n, err := r.StoreGauges.RegionsHeld(ctx, c, pod)
		switch {
		case err != nil:
			d.unanswered[name] = truncate(err.Error(), 200)
		case n > 0:
			d.held[name] = n
		}
	}
	return d, nil
}

// drainFinished announces the shrink a drain led to, once it is written.
func (r *KVClusterReconciler) drainFinished(c *kvapi.KVCluster, sts *appsv1.StatefulSet, d *drainState) {
	if d.timedOut {
		r.Recorder.Eventf(c, sts, corev1.EventTypeWarning, kvapi.ReasonDrainTimedOut, "ScaleDown", "%s",
			truncate(fmt.Sprintf("stores %s were not drained within %s: scaled from %d to %d anyway; the regions they still held fall back to their slots' stores",
				d.leaving(), contract.StoreDrainTimeout, d.from, d.to), maxEventNote))
		return
	}
	msg := fmt.Sprintf("stores %s hold no region: scaled from %d to %d", d.leaving(), d.from, d.to)
	if len(d.notReady) > 0 {
		msg += fmt.Sprintf(" (not Ready, so not drained: %s)", strings.Join(d.notReady, ", "))
	}
	r.Recorder.Eventf(c, sts, corev1.EventTypeNormal, kvapi.ReasonDrained, "ScaleDown", "%s", truncate(msg, maxEventNote))
}
