package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kvapi "github.com/bellows-kv/bellows/api/v1alpha1"
	"github.com/bellows-kv/bellows/autoscaler"
	"github.com/bellows-kv/bellows/controllers/specs"
	"github.com/bellows-kv/bellows/internal/contract"
)

// Decision is one evaluation of the autoscaler: what goes into status, and
// the replicas it recommends (nil when it has no recommendation).
type Decision struct {
	Status  kvapi.AutoscalerStatus
	Desired *int32
	// Active, Reason and Message make the ScalingActive condition.
	Active          bool
	Reason, Message string
	// Inputs are the model's inputs as evaluated (Status.Inputs renders them).
	Inputs autoscaler.Inputs
	Result autoscaler.Result
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', 6, 64) }

// parseRecorded reads back a decimal the autoscaler recorded in
// status.autoscaler.inputs; "" means none was recorded. Anything else that
// is not a finite number is an error, never a silent 0.
func parseRecorded(field, s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
		err = errors.New("not a finite number")
	}
	if err != nil {
		return 0, fmt.Errorf("status.autoscaler.inputs.%s %q: %w", field, s, err)
	}
	return f, nil
}

// Decide is the pure autoscaler step: it fills the model's inputs from the
// observation (falling back to the last evaluation's inputs for what was not
// measured this time), runs the model, clamps, stabilizes against the
// recorded recommendations, and returns what to record and apply. dur are
// the pool's durations as the spec step parsed them; regions is R and
// transfers whether any referencing cluster streams output back (b/w).
//
// The backlog term is the queued compactions only when the queue grew
// since the previous evaluation (recorded in status): a steady queue is
// served by the steady capacity, and counting it as extra would ask for
// more workers than the model in a steady state.
//
// The debt term sees what the queue cannot: at most one request per region
// is queued, so under overload the queue plateaus and the requested rate
// settles at the completed one, while the stores' compaction debt keeps
// growing. The debt is charged (chargedDebt) only while compactions wait
// too long to start, so a healthy pool gets the model's steady answer.
func Decide(pool *kvapi.CompactionPool, dur kvapi.PoolDurations, obs autoscaler.Observation, regions int32, transfers bool, now time.Time) Decision {
	spec := pool.Spec
	interval := dur.Interval
	var history []autoscaler.Sample
	if a := pool.Status.Autoscaler; a != nil {
		for _, s := range a.Recommendations {
			history = append(history, autoscaler.Sample{Time: s.Time.Time, Replicas: s.Replicas})
		}
	}
	in, demandKnown, unreadable := modelInputs(pool, dur, obs, regions, transfers)
	d := Decision{Inputs: in, Status: kvapi.AutoscalerStatus{
		LastEvaluationTime: metav1.NewTime(now),
		Inputs: kvapi.ModelInputs{
			CompactionRateBytesPerSecond: fmtFloat(in.CompactionRate),
			TransferRateBytesPerSecond:   fmtFloat(in.TransferRate),
			CacheBytes:                   spec.CacheBytes.Value(),
			CompactionSizeBytes:          fmtFloat(in.CompactionSize),
			CompactionsPerRegion:         fmtFloat(in.CompactionsPerRegion),
			IntervalSeconds:              int64(interval / time.Second),
			Regions:                      regions,
			Backlog:                      fmtFloat(in.Backlog),
			Queued:                       fmtFloat(obs.Queued),
			CompactionDebtBytes:          fmtFloat(obs.DebtBytes),
			OldestCompactionWaitSeconds:  fmtFloat(obs.OldestWait.Seconds()),
			ChargedDebtBytes:             fmtFloat(in.DebtBytes),
			TransfersOutput:              transfers,
		},
	}}
	if pool.Status.Autoscaler != nil {
		d.Status.Recommendations = pool.Status.Autoscaler.Recommendations
	}
	if !demandKnown {
		d.Status.Inputs.CompactionsPerRegion = ""
	}
	if len(unreadable) > 0 {
		d.Reason, d.Message = kvapi.ReasonMetricsUnavailable, "an unmeasured input's last value cannot be read back: "+errors.Join(unreadable...).Error()
		return d
	}
	if !demandKnown {
		d.Reason, d.Message = kvapi.ReasonMetricsUnavailable, "compaction demand is not measured yet (a rate needs two scrapes of the storage pods)"
		return d
	}
	res, err := autoscaler.Compute(in)
	d.Result = res
	if err != nil {
		if ie, ok := autoscaler.IsInfeasible(err); ok {
			d.Reason, d.Message = kvapi.ReasonModelInfeasible, ie.Reason+": "+ie.Message
		} else {
			d.Reason, d.Message = kvapi.ReasonMetricsUnavailable, "cannot size the pool: "+err.Error()
		}
		return d
	}
	recommended := autoscaler.Clamp(res.Total, spec.MinReplicas, spec.MaxReplicas)
	current := pool.DesiredReplicasOrDefault()
	desired, kept := autoscaler.Stabilize(now, current, recommended, history, autoscaler.Windows{
		Up: dur.ScaleUpWindow, Down: dur.ScaleDownWindow,
	})
	d.Status.Recommendations = nil
	for _, s := range kept {
		d.Status.Recommendations = append(d.Status.Recommendations, kvapi.Recommendation{Time: metav1.NewTime(s.Time), Replicas: s.Replicas})
	}
	out := &kvapi.ModelOutputs{
		CompactionDurationSeconds: fmtFloat(res.D),
		ConcurrentJobsPerWorker:   res.L,
		CompactionsPerWorker:      fmtFloat(res.H),
		RegionsPerWorker:          res.RegionsPerWorker,
		ModelReplicas:             int32(min(res.Workers, 1<<30)),
		BacklogReplicas:           int32(min(res.BacklogWorkers, 1<<30)),
		DebtReplicas:              int32(min(res.DebtWorkers, 1<<30)),
		RecommendedReplicas:       recommended,
	}
	d.Status.Outputs = out
	d.Desired = &desired
	d.Active = true
	d.Reason = kvapi.ReasonModelRecommendation
	d.Message = fmt.Sprintf("the capacity model needs %d workers (%d for R=%d regions, %d for a backlog of %s, %d for a compaction debt of %s charged while compactions wait %s, over %s); clamped to [%d, %d] and stabilized: %d",
		res.Total, res.Workers, regions, res.BacklogWorkers, fmtFloat(in.Backlog), res.DebtWorkers, autoscaler.FormatBytes(in.DebtBytes),
		obs.OldestWait.Round(time.Second), in.MaxWait, spec.MinReplicas, spec.MaxReplicas, desired)
	return d
}

// modelInputs fills the model's inputs for Decide from the observation,
// falling back to the last evaluation's recorded inputs (status) for what was
// not measured this time. demandKnown is false while the compaction demand
// was never measured; unreadable are the recorded values that do not parse.
func modelInputs(pool *kvapi.CompactionPool, dur kvapi.PoolDurations, obs autoscaler.Observation, regions int32, transfers bool) (in autoscaler.Inputs, demandKnown bool, unreadable []error) {
	spec := pool.Spec
	interval := dur.Interval
	var last kvapi.ModelInputs
	if a := pool.Status.Autoscaler; a != nil {
		last = a.Inputs
	}
	// An unmeasured input falls back to the last evaluation's; a recorded
	// value that does not parse is an error: this evaluation makes no
	// recommendation, and records the fallback so the next one can.
	pick := func(measured float64, field, lastS string, fallback float64) float64 {
		if measured > 0 {
			return measured
		}
		v, err := parseRecorded(field, lastS)
		if err != nil {
			unreadable = append(unreadable, err)
		}
		if v > 0 {
			return v
		}
		return fallback
	}
	var backlog float64
	if last.Queued != "" {
		prevQueued, err := parseRecorded("queued", last.Queued)
		if err != nil {
			unreadable = append(unreadable, err)
		}
		if obs.Queued > prevQueued {
			backlog = obs.Queued
		}
	}
	charged, err := chargedDebt(obs, last.ChargedDebtBytes, dur.MaxWait)
	if err != nil {
		unreadable = append(unreadable, err)
	}
	in = autoscaler.Inputs{
		DebtBytes:      charged,
		MaxWait:        cmp.Or(dur.MaxWait, kvapi.DefaultMaxCompactionWait),
		CompactionRate: pick(obs.CompactionRate, "compactionRateBytesPerSecond", last.CompactionRateBytesPerSecond, 0),
		TransferRate:   pick(obs.TransferRate, "transferRateBytesPerSecond", last.TransferRateBytesPerSecond, float64(spec.TransferRateBytesPerSecond)),
		CacheBytes:     float64(spec.CacheBytes.Value()),
		CompactionSize: pick(obs.CompactionSize, "compactionSizeBytes", last.CompactionSizeBytes, 0),
		Interval:       interval,
		Regions:        int64(regions),
		Backlog:        backlog,
		NoTransfer:     !transfers,
	}
	demandKnown = true
	switch {
	case obs.DemandMeasured && regions > 0:
		in.CompactionsPerRegion = obs.RequestRate * interval.Seconds() / float64(regions)
	case obs.DemandMeasured:
		in.CompactionsPerRegion = 0
	case last.CompactionsPerRegion != "":
		v, err := parseRecorded("compactionsPerRegion", last.CompactionsPerRegion)
		if err != nil {
			unreadable = append(unreadable, err)
			demandKnown = false
		}
		in.CompactionsPerRegion = v
	default:
		demandKnown = false
	}
	return in, demandKnown, unreadable
}

// chargedDebt is the compaction debt the model is charged: the stores'
// debt from when their oldest wait exceeds maxWait until it falls to half
// of it (lastCharged, recorded in status, says whether the previous
// evaluation charged it). The band keeps a wait near the bound from adding
// and removing workers at alternate evaluations; the scale-down window
// smooths the rest.
func chargedDebt(obs autoscaler.Observation, lastCharged string, maxWait time.Duration) (float64, error) {
	maxWait = cmp.Or(maxWait, kvapi.DefaultMaxCompactionWait)
	was, err := parseRecorded("chargedDebtBytes", lastCharged)
	if obs.OldestWait > maxWait || (was > 0 && obs.OldestWait > maxWait/2) {
		return obs.DebtBytes, err
	}
	return 0, err
}

// autoscalePass is what the autoscaler's steps found and did in one pass;
// autoscalerStatus turns it into status. The steps never stop the pass: a
// problem is recorded here, logged and reported as an event, and the
// Deployment step runs regardless.
type autoscalePass struct {
	// observed is true when an evaluation was due and the pods were listed
	// and scraped; now, workers, regions and obs are valid then.
	observed bool
	now      time.Time
	workers  []corev1.Pod
	regions  int32
	// transfers: some referencing cluster's warmup mode streams output
	// from the workers.
	transfers bool
	obs       autoscaler.Observation
	// scrapeErr is the scrape's error (no pod answered).
	scrapeErr error
	// decision is this pass's evaluation (nil when none was due or possible).
	decision *Decision
	// err is why the autoscaler could not evaluate, or could not apply its
	// recommendation.
	err error
	// outOfBounds reports spec.replicas outside [min, max] in a mode where
	// the operator leaves them alone (see compactionpool_bounds.go).
	outOfBounds string
}

// observe lists and scrapes the pool's workers and the referencing
// clusters' stores when the sync period has passed.
func (r *CompactionPoolReconciler) observe(ctx context.Context, p *poolPass) Result {
	pool := p.pool
	if pool.Spec.Autoscaling.Mode == kvapi.AutoscalingDisabled {
		return Continue()
	}
	now := r.Clock.Now()
	period := p.durations.SyncPeriod
	if a := pool.Status.Autoscaler; a != nil {
		if next := a.LastEvaluationTime.Add(period); now.Before(next) {
			return Requeue(next.Sub(now))
		}
	}
	// The spec's and status' counts are each cluster's fallback in
	// targets.RegionCounts; R itself comes after the scrape.
	targets, _, transfers, workers, err := r.targets(ctx, pool)
	if err != nil {
		r.autoscalerFailed(ctx, p, fmt.Errorf("list the pods to scrape: %w", err))
		return Requeue(period)
	}
	obs, scrapeErr := r.Source.Observe(ctx, targets)
	if scrapeErr != nil {
		log.FromContext(ctx).Info("metrics scrape failed", "error", scrapeErr.Error())
	}
	// R is the live region count: regions split as data grows.
	regions := autoscaler.LiveRegions(targets.RegionCounts, obs.ClusterRegions)
	p.autoscale = autoscalePass{observed: true, now: now, workers: workers, regions: regions, transfers: transfers, obs: obs, scrapeErr: scrapeErr}
	return Requeue(period)
}

// setDeletionCosts makes a scale-down prefer idle workers. A failure does
// not hold back the scale or the Deployment: a busy worker removed first
// drains in preStop, so its jobs are delayed, not lost.
func (r *CompactionPoolReconciler) setDeletionCosts(ctx context.Context, p *poolPass) Result {
	a := &p.autoscale
	if !a.observed {
		return Continue()
	}
	if err := r.patchDeletionCosts(ctx, a.workers, a.obs.InflightJobs); err != nil {
		log.FromContext(ctx).Error(err, "cannot set the workers' pod-deletion-cost")
		r.Recorder.Eventf(p.pool, nil, corev1.EventTypeWarning, kvapi.ReasonReconcileError, "SetPodDeletionCost", "%v", err)
	}
	return Continue()
}

// recommend evaluates the model and, in Model mode, writes the
// recommendation through /scale; the Deployment step then applies it.
func (r *CompactionPoolReconciler) recommend(ctx context.Context, p *poolPass) Result {
	a := &p.autoscale
	if !a.observed {
		return Continue()
	}
	pool := p.pool
	d := Decide(pool, p.durations, a.obs, a.regions, a.transfers, a.now)
	a.decision = &d
	r.publish(pool, d)
	current, next := pool.DesiredReplicasOrDefault(), replicasAfter(pool, d)
	if next == current {
		return Continue()
	}
	if err := r.scale(ctx, pool, next); err != nil {
		r.autoscalerFailed(ctx, p, fmt.Errorf("apply the recommendation of %d workers: %w", next, err))
		return Continue()
	}
	r.Recorder.Eventf(pool, nil, corev1.EventTypeNormal, "Scaled", "Scale", "capacity model: %d → %d workers", current, next)
	pool.Spec.Replicas = &next
	return Continue()
}

// replicasAfter is spec.replicas once the operator has applied decision d
// to pool: the recommendation (clamped to [minReplicas, maxReplicas] and
// stabilized by Decide) in Model mode; unchanged in External mode (an HPA or
// KEDA writes spec.replicas), in Disabled mode (the user does), and when
// the model made no recommendation.
func replicasAfter(pool *kvapi.CompactionPool, d Decision) int32 {
	if pool.Spec.Autoscaling.Mode != kvapi.AutoscalingModel || !d.Active || d.Desired == nil {
		return pool.DesiredReplicasOrDefault()
	}
	return *d.Desired
}

// autoscalerFailed records why the autoscaler could not do its part of the
// pass, for the ScalingActive condition, and reports it as an event.
func (r *CompactionPoolReconciler) autoscalerFailed(ctx context.Context, p *poolPass, err error) {
	p.autoscale.err = err
	log.FromContext(ctx).Error(err, "autoscaler")
	r.Recorder.Eventf(p.pool, nil, corev1.EventTypeWarning, kvapi.ReasonReconcileError, "Autoscale", "%v", err)
}

// autoscalerStatus records the autoscaler's part of the pass in status:
// the evaluation (inputs, outputs, recommendation) and ScalingActive.
func autoscalerStatus(pool *kvapi.CompactionPool, a *autoscalePass) {
	st := &pool.Status
	gen := pool.Generation
	if pool.Spec.Autoscaling.Mode == kvapi.AutoscalingDisabled {
		st.Autoscaler, st.DesiredReplicas = nil, nil
		msg := "autoscaling.mode is Disabled: spec.replicas is left to the user"
		if a.outOfBounds != "" {
			msg += "; " + a.outOfBounds
		}
		setCondition(&st.Conditions, gen, kvapi.ConditionScalingActive, false, kvapi.ReasonAutoscalingDisabled, msg)
		return
	}
	if d := a.decision; d != nil {
		st.Autoscaler, st.DesiredReplicas = &d.Status, d.Desired
		msg := d.Message
		if a.scrapeErr != nil && !d.Active {
			msg += " (scrape: " + a.scrapeErr.Error() + ")"
		}
		setCondition(&st.Conditions, gen, kvapi.ConditionScalingActive, d.Active, d.Reason, msg)
	}
	if a.err != nil {
		setCondition(&st.Conditions, gen, kvapi.ConditionScalingActive, false, kvapi.ReasonReconcileError, "autoscaler: "+a.err.Error())
	}
	if a.outOfBounds != "" {
		c := meta.FindStatusCondition(st.Conditions, kvapi.ConditionScalingActive)
		if c != nil && !strings.Contains(c.Message, a.outOfBounds) {
			c.Message += "; " + a.outOfBounds
		}
	}
}

// scale writes spec.replicas through the /scale subresource, as an HPA would.
func (r *CompactionPoolReconciler) scale(ctx context.Context, pool *kvapi.CompactionPool, replicas int32) error {
	s := &autoscalingv1.Scale{}
	if err := r.SubResource("scale").Get(ctx, pool, s); err != nil {
		return fmt.Errorf("get /scale: %w", err)
	}
	s.Spec.Replicas = replicas
	if err := r.SubResource("scale").Update(ctx, pool, client.WithSubResourceBody(s)); err != nil {
		return fmt.Errorf("update /scale: %w", err)
	}
	return nil
}

// targets lists the pool's workers and the storage pods of the KVClusters
// that reference it, sums their regions (R), and says whether any of them
// streams compaction output back from the workers (its warmup mode), so
// the model charges b/w. A pool shared by clusters in different modes is
// sized for the ones that transfer: the conservative answer.
func (r *CompactionPoolReconciler) targets(ctx context.Context, pool *kvapi.CompactionPool) (autoscaler.Targets, int32, bool, []corev1.Pod, error) {
	t := autoscaler.Targets{Pool: pool.Namespace + "/" + pool.Name}
	tlsPods := false
	endpoint := func(pod *corev1.Pod) (autoscaler.Endpoint, bool) {
		if pod.Status.PodIP == "" || !pod.DeletionTimestamp.IsZero() {
			return autoscaler.Endpoint{}, false
		}
		scheme := "http"
		if specs.PodServesTLS(pod) {
			scheme = "https"
			tlsPods = true
		}
		return autoscaler.Endpoint{Pod: pod.Name, URL: fmt.Sprintf("%s://%s:%d/metrics", scheme, pod.Status.PodIP, contract.MetricsPort)}, true
	}
	var workers corev1.PodList
	if err := r.List(ctx, &workers, client.InNamespace(pool.Namespace), client.MatchingLabels(specs.PoolSelectorLabels(pool))); err != nil {
		return t, 0, false, nil, err
	}
	for i := range workers.Items {
		if e, ok := endpoint(&workers.Items[i]); ok {
			t.Workers = append(t.Workers, e)
		}
	}
	var clusters kvapi.KVClusterList
	if err := r.List(ctx, &clusters, client.InNamespace(pool.Namespace)); err != nil {
		return t, 0, false, nil, err
	}
	var regions int32
	var transfers bool
	for _, c := range clusters.Items {
		if c.Spec.CompactionPoolRef == nil || c.Spec.CompactionPoolRef.Name != pool.Name || !c.DeletionTimestamp.IsZero() {
			continue
		}
		mode := contract.WarmupMode(c.Spec.Engine.Warmup.Mode)
		if mode == "" {
			mode = contract.DefaultWarmupMode
		}
		transfers = transfers || mode.TransfersOutput()
		count := c.Spec.Regions.RegionCount()
		if c.Status.Regions > 0 {
			count = c.Status.Regions
		}
		regions += count
		key := c.Namespace + "/" + c.Name
		if t.RegionCounts == nil {
			t.RegionCounts = map[string]int32{}
		}
		t.RegionCounts[key] = count
		var stores corev1.PodList
		if err := r.List(ctx, &stores, client.InNamespace(pool.Namespace), client.MatchingLabels(specs.StoreSelectorLabels(&c))); err != nil {
			return t, 0, false, nil, err
		}
		for i := range stores.Items {
			if e, ok := endpoint(&stores.Items[i]); ok {
				e.Cluster = key
				t.Stores = append(t.Stores, e)
			}
		}
	}
	if tlsPods {
		// Every pod of the namespace has a certificate of its CA.
		cfg, err := r.credentials.forMode(ctx, r.certificates(), pool.Namespace, pool.Spec.TLS.Mode, kvapi.MonitoringTLSSecretName)
		if err != nil {
			return t, 0, false, nil, fmt.Errorf("the operator's client certificate: %w", err)
		}
		t.TLS = cfg
	}
	return t, regions, transfers, workers.Items, nil
}

// patchDeletionCosts sets each worker's pod-deletion-cost to its number of
// in-flight jobs. A failed patch does not stop the others.
func (r *CompactionPoolReconciler) patchDeletionCosts(ctx context.Context, workers []corev1.Pod, inflight map[string]float64) error {
	var errs []error
	for i := range workers {
		pod := &workers[i]
		jobs, ok := inflight[pod.Name]
		if !ok || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		cost := strconv.Itoa(int(jobs))
		if pod.Annotations[contract.PodDeletionCostAnnotation] == cost {
			continue
		}
		patch := client.MergeFrom(pod.DeepCopy())
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[contract.PodDeletionCostAnnotation] = cost
		if err := client.IgnoreNotFound(r.Patch(ctx, pod, patch)); err != nil {
			errs = append(errs, fmt.Errorf("pod %s deletion cost: %w", pod.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (r *CompactionPoolReconciler) publish(pool *kvapi.CompactionPool, d Decision) {
	m := r.Metrics
	if m == nil {
		return
	}
	l := pool.Namespace + "/" + pool.Name
	in := d.Inputs
	m.CompactionRate.WithLabelValues(l).Set(in.CompactionRate)
	m.TransferRate.WithLabelValues(l).Set(in.TransferRate)
	m.CacheBytes.WithLabelValues(l).Set(in.CacheBytes)
	m.CompactionSize.WithLabelValues(l).Set(in.CompactionSize)
	m.CompactionsPerRegion.WithLabelValues(l).Set(in.CompactionsPerRegion)
	m.Regions.WithLabelValues(l).Set(float64(in.Regions))
	m.Backlog.WithLabelValues(l).Set(in.Backlog)
	m.ChargedDebt.WithLabelValues(l).Set(in.DebtBytes)
	if w, err := strconv.ParseFloat(d.Status.Inputs.OldestCompactionWaitSeconds, 64); err == nil {
		m.OldestWait.WithLabelValues(l).Set(w)
	}
	if d.Active {
		m.Duration.WithLabelValues(l).Set(d.Result.D)
		m.ConcurrentJobs.WithLabelValues(l).Set(float64(d.Result.L))
		m.CompactionsPerWorker.WithLabelValues(l).Set(d.Result.H)
		m.Desired.WithLabelValues(l).Set(float64(*d.Desired))
	}
}
