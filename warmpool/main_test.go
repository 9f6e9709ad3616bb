package warmpool

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any goroutine outlives its tests; each
// test also checks so on its own once its pool has shut down (newTestPool).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
