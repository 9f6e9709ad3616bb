package pgtest

import (
	"context"
	"database/sql"
	"os"
	"testing"
)

// TestDatabase: a database of its own, usable, gone after the test.
func TestDatabase(t *testing.T) {
	dsn := os.Getenv("AGENTOS_GATEWAY_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("AGENTOS_GATEWAY_TEST_POSTGRES is not set (make test sets it)")
	}
	var name string
	t.Run("own", func(t *testing.T) {
		db, err := sql.Open("pgx", Database(t, dsn, "pgtest"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.QueryRowContext(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var n int
	if err := admin.QueryRowContext(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n); err != nil || n != 0 || name == "" {
		t.Fatalf("database %q after its test: %d, %v", name, n, err)
	}
}
