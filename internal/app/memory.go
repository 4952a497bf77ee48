package app

import (
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/recordio-bridge/bridge/config"
)

// setMemoryLimit sets the Go runtime's soft memory limit below the container's, so the
// garbage collector works harder before the kernel's OOM killer acts: GOMEMLIMIT from
// the environment wins; else memory.limit; else 90 % of POD_MEMORY_LIMIT (the
// container's limit in bytes, from the downward API); else the runtime's default (none).
func setMemoryLimit(m config.Memory, log *slog.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", v, "bytes", debug.SetMemoryLimit(-1), "budget", int64(m.Budget))
		return
	}
	limit, from := int64(m.Limit), "memory.limit"
	if limit == 0 {
		v := os.Getenv("POD_MEMORY_LIMIT")
		if v == "" {
			log.Info("no memory limit (set memory.limit, POD_MEMORY_LIMIT or GOMEMLIMIT)", "budget", int64(m.Budget))
			return
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			log.Warn("POD_MEMORY_LIMIT is not a positive number of bytes; no memory limit set", "POD_MEMORY_LIMIT", v)
			return
		}
		limit, from = n/10*9, "90% of POD_MEMORY_LIMIT"
	}
	debug.SetMemoryLimit(limit)
	log.Info("memory limit set", "from", from, "bytes", limit, "budget", int64(m.Budget))
	if int64(m.Budget) > limit/2 {
		log.Warn("memory.budget is more than half the memory limit; the process needs the rest for its own buffers",
			"budget", int64(m.Budget), "limit", limit)
	}
}
