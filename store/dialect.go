package store

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

const (
	dialectSQLite   = "sqlite"
	dialectPostgres = "postgres"
)

// dialect is what differs between the two databases in the SQL this package
// writes; everything else is shared. Queries are written with "?"
// placeholders, "INSERT … ON CONFLICT … DO NOTHING" and "UPDATE … RETURNING",
// which both understand.
type dialect struct {
	name string
	// dollar: placeholders are $1, $2, … rather than ?.
	dollar bool
	// forUpdate locks the rows a SELECT in a transaction reads. SQLite needs
	// none: its transactions take the whole database's write lock at BEGIN.
	forUpdate string
	// timeType is the column type of timestamps, for the tables this package
	// creates outside the migrations.
	timeType string
}

var (
	sqlite = dialect{
		name:     dialectSQLite,
		timeType: "INTEGER",
	}
	postgres = dialect{
		name:      dialectPostgres,
		dollar:    true,
		forUpdate: " FOR UPDATE",
		timeType:  "TIMESTAMPTZ",
	}
)

// rebind rewrites the "?" placeholders of query for d. The queries of this
// package have no "?" inside literals or identifiers.
func (d dialect) rebind(query string) string {
	if !d.dollar {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n := 0
	for {
		i := strings.IndexByte(query, '?')
		if i < 0 {
			b.WriteString(query)
			return b.String()
		}
		n++
		b.WriteString(query[:i])
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(n))
		query = query[i+1:]
	}
}

// ts converts t into the argument of a timestamp column: Unix microseconds
// on SQLite, where an INTEGER sorts and compares exactly (the driver's default
// text encoding trims trailing zeros and so does not sort); a timestamptz on
// PostgreSQL, so the column stays readable there.
func (d dialect) ts(t time.Time) any {
	t = t.UTC().Truncate(time.Microsecond)
	if d.dollar {
		return t
	}
	return t.UnixMicro()
}

// timeCol scans a timestamp column of either dialect into a UTC time.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(src any) error {
	switch v := src.(type) {
	case int64:
		*c.t = time.UnixMicro(v).UTC()
	case time.Time:
		*c.t = v.UTC()
	case nil:
		*c.t = time.Time{}
	default:
		return fmt.Errorf("store: cannot scan %T into a timestamp", src)
	}
	return nil
}

// scanTime returns a destination for Scan that fills t.
func scanTime(t *time.Time) timeCol { return timeCol{t} }

var _ sql.Scanner = timeCol{}
