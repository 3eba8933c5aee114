package cli

import (
	"log/slog"
	"math"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/bellows-kv/bellows/internal/contract"
)

// setMemoryLimit gives the Go runtime a soft memory limit of
// contract.GoMemoryLimitRatio of the container's memory limit (cgroup v1
// or v2), so that a pod's heap stays inside its limit instead of reaching
// twice what is live before a collection. Outside a limited cgroup, or
// with GOMEMLIMIT or AUTOMEMLIMIT=off in the environment, nothing changes.
func setMemoryLimit(log *slog.Logger) {
	limit, err := memlimit.Set(memlimit.WithRatio(contract.GoMemoryLimitRatio), memlimit.WithProvider(memlimit.FromCgroup))
	switch {
	case err != nil:
		// No cgroup (not Linux, or no memory controller): no limit to follow.
		log.Debug("no container memory limit to follow", "err", err)
	case limit > 0 && limit < math.MaxInt64:
		log.Info("Go memory limit set from the container's", "bytes", limit, "ratio", contract.GoMemoryLimitRatio)
	}
}
