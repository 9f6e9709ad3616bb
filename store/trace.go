package store

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// tracer makes the spans of store operations. The global provider's tracer
// follows the provider the gateway installs at start (package tracing).
var tracer = otel.Tracer("github.com/agentos-gateway/agentos-gateway/store")

// opSpanOptions are the options of every store span, made once: a variadic
// argument built at each call would be allocated at each call.
var opSpanOptions = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// maxQueryText bounds the statement a span carries. Statements are written
// with placeholders, so the text holds no values, only its length varies.
const maxQueryText = 2048

// startOp starts the span of one statement run on q outside a transaction,
// named "store <Method>" after the DB method that runs it, under the span
// in ctx. It returns nil, and costs one context lookup, when that span does
// not record (tracing off, or the gateway's own background work), and for
// a statement of a transaction, which its transaction's span covers.
func (db *DB) startOp(ctx context.Context, q querier, query string) trace.Span {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	if _, inTx := q.(*sql.Tx); inTx {
		return nil
	}
	span := db.startSpan(ctx)
	span.SetAttributes(semconv.DBOperationNameKey.String(sqlVerb(query)))
	if len(query) > maxQueryText {
		query = query[:maxQueryText]
	}
	span.SetAttributes(semconv.DBQueryTextKey.String(strings.TrimSpace(query)))
	return span
}

// startTx starts the span of a transaction (inTx), as startOp does for one
// statement.
func (db *DB) startTx(ctx context.Context) trace.Span {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return nil
	}
	span := db.startSpan(ctx)
	span.SetAttributes(semconv.DBOperationNameKey.String("transaction"))
	return span
}

// startSpan starts a span named after the method that called the store's
// helpers.
func (db *DB) startSpan(ctx context.Context) trace.Span {
	method, function := callerMethod()
	system := semconv.DBSystemNameSQLite
	if db.d.name == dialectPostgres {
		system = semconv.DBSystemNamePostgreSQL
	}
	_, span := tracer.Start(ctx, "store "+method, opSpanOptions...)
	span.SetAttributes(system, semconv.CodeFunctionNameKey.String(function))
	return span
}

// endOp ends span (nil: none was started) for an operation that returned
// err. A row not found, or a refusal in the gateway's words (a conflict, a
// quota), is an answer rather than a fault: the span keeps its code as
// error.type without an error status.
func endOp(span trace.Span, err error) {
	if span == nil {
		return
	}
	switch code := gateway.ErrorCode(err); {
	case err == nil, errors.Is(err, sql.ErrNoRows):
	case code == gateway.CodeInternal || code == gateway.CodeUnavailable || code == gateway.CodeDeadlineExceeded:
		span.SetStatus(codes.Error, err.Error())
	default:
		span.SetAttributes(semconv.ErrorTypeKey.String(string(code)))
	}
	span.End()
}

// storeHelpers are the functions between a DB method and its statement,
// skipped when naming the span after the method.
var storeHelpers = map[string]bool{"exec": true, "query": true, "queryRow": true, "inTx": true,
	"startOp": true, "startTx": true, "startSpan": true, "callerMethod": true}

// storeFuncPrefix begins the full name of every function of this package.
const storeFuncPrefix = "github.com/agentos-gateway/agentos-gateway/store."

// callerMethod is the name of the store method that ran the statement or
// transaction being traced: the innermost exported function of this
// package on the stack (GetTenant rather than the getTenant it calls), else
// the innermost one that is not a helper; short, with its receiver and closure
// suffixes cut ("CreateVM" for store.(*DB).CreateVM.func1), and in full. It
// is only called for a recording span.
func callerMethod() (short, full string) {
	var pcs [16]uintptr
	n := runtime.Callers(2, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	short, full = "operation", ""
	for {
		f, more := frames.Next()
		if !strings.HasPrefix(f.Function, storeFuncPrefix) {
			return short, full
		}
		name := shortFuncName(f.Function)
		switch {
		case name == "" || storeHelpers[name]:
		case name[0] >= 'A' && name[0] <= 'Z':
			return name, f.Function
		case full == "":
			short, full = name, f.Function
		}
		if !more {
			return short, full
		}
	}
}

// shortFuncName cuts a function's full name to its own name: package path,
// receiver, type parameters and closure suffixes dropped.
func shortFuncName(full string) string {
	name := strings.ReplaceAll(full[strings.LastIndexByte(full, '/')+1:], "[...]", "")
	_, name, _ = strings.Cut(name, ".") // the package name
	if strings.HasPrefix(name, "(") {
		if _, rest, ok := strings.Cut(name, ")."); ok {
			name = rest
		}
	}
	name, _, _ = strings.Cut(name, ".")
	return name
}

// sqlVerb is the statement's first keyword (SELECT, INSERT, WITH, ...).
func sqlVerb(query string) string {
	query = strings.TrimSpace(query)
	end := strings.IndexFunc(query, func(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') })
	if end < 0 {
		end = len(query)
	}
	return strings.ToUpper(query[:end])
}
