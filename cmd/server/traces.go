package main

import (
	"context"
	"time"

	"github.com/rs/zerolog"
)

// traceFlushBudget bounds the flush of the spans still buffered when the
// gateway stops: a collector that does not answer must not hold the exit.
const traceFlushBudget = 5 * time.Second

// flushTraces sends the spans still buffered and stops their exporter
// (stop is what tracing.Setup returned).
func flushTraces(log zerolog.Logger, stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushBudget)
	defer cancel()
	if err := stop(ctx); err != nil {
		log.Warn().Err(err).Msg("flushing traces")
	}
}
