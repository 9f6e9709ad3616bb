package sessions

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: the
// service's purger, recorders and turns must all end with Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
