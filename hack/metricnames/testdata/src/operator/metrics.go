package operator

import "github.com/prometheus/client_golang/prometheus"

func register(reg prometheus.Registerer) {
	g := func(name, help string) *prometheus.GaugeVec {
		v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"pool"})
		reg.MustRegister(v)
		return v
	}
	g("bellows_autoscaler_replicas", "actual")
	g("bellows_autoscaler_desired_replicas", "recommended")
}
