package v1alpha1

import (
	"errors"
	"fmt"
	"time"
)

// Questions a CompactionPool answers about itself (see kvcluster_funcs.go).

// CompactorServiceName is the Service in front of the workers of the pool
// named pool: a KVCluster knows its pool only by name.
func CompactorServiceName(pool string) string { return pool + "-compactor" }

// ServiceName is the Service in front of the pool's workers, which the
// stores discover them through.
func (p *CompactionPool) ServiceName() string { return CompactorServiceName(p.Name) }

// DeploymentName is the workers' Deployment.
func (p *CompactionPool) DeploymentName() string { return p.Name + "-compactor" }

// PodDisruptionBudgetName is the workers' PodDisruptionBudget.
func (p *CompactionPool) PodDisruptionBudgetName() string { return p.Name + "-compactor" }

// ServiceMonitorName is the ServiceMonitor that scrapes the workers.
func (p *CompactionPool) ServiceMonitorName() string { return p.Name + "-compactor" }

// NetworkPolicyName is the NetworkPolicy that says who may reach the
// workers' ports.
func (p *CompactionPool) NetworkPolicyName() string { return p.Name + "-compactor" }

// WorkerTLSSecretName is the Secret holding the workers' node
// certificate, mounted at contract.TLSMountPath.
func (p *CompactionPool) WorkerTLSSecretName() string { return p.Name + "-worker-tls" }

// IsPaused reports whether the operator must leave the pool, its workers and
// its size alone (the paused annotation).
func (p *CompactionPool) IsPaused() bool { return isPaused(p.Annotations) }

// MaxCompactionPoolNameLength is the longest pool name whose children get
// valid names: the Service `<name>-compactor` must be a DNS-1035 label, at
// most 63 characters, so the name has 63 - len("-compactor") = 53. The
// other children (Deployment, PodDisruptionBudget, ServiceMonitor) are DNS
// subdomains of up to 253 characters; the Deployment's ReplicaSets and pods
// get generated names that Kubernetes shortens itself; the name is also the
// app.kubernetes.io/instance label value (63). The CRD's rule on
// metadata.name (compactionpool_types.go) says 53 too (a test checks it).
const MaxCompactionPoolNameLength = 63 - len("-compactor")

// Lower bounds of a pool's durations. The CRD's rules on these fields
// (compactionpool_types.go) say the same; Durations checks them again for an
// object stored before those rules existed.
const (
	// MinDrainTimeout gives a worker being removed time to hand back its jobs.
	MinDrainTimeout = time.Second
	// MinInterval: the model counts demand per interval, and status records
	// the interval in whole seconds.
	MinInterval = time.Second
	// MinSyncPeriod keeps the autoscaler from re-evaluating in a tight loop.
	MinSyncPeriod = time.Second
	// MinMaxCompactionWait: a wait is measured between scrapes, seconds apart.
	MinMaxCompactionWait = time.Second
)

// PoolDurations are a pool's durations, parsed.
type PoolDurations struct {
	DrainTimeout    time.Duration
	Interval        time.Duration
	SyncPeriod      time.Duration
	ScaleUpWindow   time.Duration
	ScaleDownWindow time.Duration
	MaxWait         time.Duration
}

// Durations parses the durations of a defaulted pool and checks their lower
// bounds. The error names every field that fails, with its value; the CRD
// rejects all of them, so it only happens to an object stored before its
// rules existed, and the reconciler reports it on that object.
func (s *CompactionPoolSpec) Durations() (PoolDurations, error) {
	var d PoolDurations
	var errs []error
	parse := func(field string, v Duration, lowest time.Duration, into *time.Duration) {
		got, err := v.Parse()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("spec.%s: %w", field, err))
		case got < lowest:
			errs = append(errs, fmt.Errorf("spec.%s: %s is below the minimum %s", field, v, lowest))
		default:
			*into = got
		}
	}
	a := &s.Autoscaling
	parse("drainTimeout", s.DrainTimeout, MinDrainTimeout, &d.DrainTimeout)
	parse("autoscaling.interval", a.Interval, MinInterval, &d.Interval)
	parse("autoscaling.syncPeriod", a.SyncPeriod, MinSyncPeriod, &d.SyncPeriod)
	parse("autoscaling.scaleUpStabilizationWindow", a.ScaleUpStabilizationWindow, 0, &d.ScaleUpWindow)
	parse("autoscaling.scaleDownStabilizationWindow", a.ScaleDownStabilizationWindow, 0, &d.ScaleDownWindow)
	parse("autoscaling.maxCompactionWait", a.MaxCompactionWait, MinMaxCompactionWait, &d.MaxWait)
	return d, errors.Join(errs...)
}

// DrainTimeoutOrDefault is spec.drainTimeout, or its default when it does
// not parse. The reconciler builds nothing for a pool whose durations fail
// Durations (the pass stops with InvalidSpec), so the builders, which have
// no error to return, only see the fallback for a pool no reconciler
// checked.
func (s *CompactionPoolSpec) DrainTimeoutOrDefault() time.Duration {
	if d, err := s.DrainTimeout.Parse(); err == nil && d >= MinDrainTimeout {
		return d
	}
	return DefaultDrainTimeout
}
