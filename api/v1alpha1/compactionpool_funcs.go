package v1alpha1

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

// IsPaused reports whether the operator must leave the pool, its workers and
// its size alone (the paused annotation).
func (p *CompactionPool) IsPaused() bool { return isPaused(p.Annotations) }
