package store

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func mustVM(t *testing.T, db *DB, tenantID, id string, state gateway.VMState) {
	t.Helper()
	if err := db.CreateVM(testContext(t), gateway.VM{ID: id, TenantID: tenantID, State: state}); err != nil {
		t.Fatalf("CreateVM(%s): %v", id, err)
	}
}

// twoTenants stores the tenants acme and globex with a ready VM each, vm_a
// and vm_g: the cast of the tests that check one tenant cannot reach the
// other's records.
func twoTenants(t *testing.T, db *DB) {
	t.Helper()
	mustTenant(t, db, "acme")
	mustTenant(t, db, "globex")
	mustVM(t, db, "acme", "vm_a", gateway.VMReady)
	mustVM(t, db, "globex", "vm_g", gateway.VMReady)
}

func mustSession(t *testing.T, db *DB, s gateway.Session) gateway.Session {
	t.Helper()
	out, err := db.CreateSession(testContext(t), s)
	if err != nil {
		t.Fatalf("CreateSession(%s/%s): %v", s.VMID, s.ID, err)
	}
	return out
}

// sessionsEqual compares sessions, their times with Equal.
func sessionsEqual(a, b gateway.Session) bool {
	if !a.CreatedAt.Equal(b.CreatedAt) || !a.UpdatedAt.Equal(b.UpdatedAt) {
		return false
	}
	a.CreatedAt, a.UpdatedAt, b.CreatedAt, b.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// event returns the event of seq of a session, with Data that a re-encoding
// would not reproduce byte for byte.
func event(vmID, sessionID string, seq uint64, at time.Time) gateway.SessionEvent {
	return gateway.SessionEvent{
		VMID: vmID, SessionID: sessionID, Sequence: seq, Time: at, Type: "agent_message_chunk",
		Data: json.RawMessage(fmt.Sprintf(`{"sequence": %d,  "type":"agent_message_chunk", "text":"caf\u00e9 \u2603"}`, seq)),
	}
}

func seqs(events []gateway.SessionEvent) []uint64 {
	out := []uint64{}
	for _, e := range events {
		out = append(out, e.Sequence)
	}
	return out
}

func TestSessionCreateGetSetState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		twoTenants(t, db)

		created := time.Date(2025, 6, 7, 8, 9, 10, 123456789, time.FixedZone("CEST", 2*3600))
		in := gateway.Session{
			ID: "ses_1", TenantID: "acme", VMID: "vm_a", Agent: "claude", Cwd: "/home/agent",
			AdditionalDirectories: []string{"/data", "/tmp/x"}, PermissionPolicy: "ask",
			PermissionDefault:  &gateway.PermissionDefault{Decision: gateway.DecisionReject, TimeoutSeconds: 30},
			State:              gateway.SessionUnloaded,
			PendingPermissions: []gateway.Permission{{RequestID: "never stored"}},
			CreatedAt:          created,
		}
		db.now = func() time.Time { return created.Add(time.Hour).UTC().Truncate(time.Microsecond) }
		out, err := db.CreateSession(ctx, in)
		if err != nil {
			t.Fatalf("CreateSession: %v", err)
		}
		want := in
		want.PendingPermissions = nil
		want.CreatedAt = created.UTC().Truncate(time.Microsecond)
		want.UpdatedAt = db.now() // zero means now
		if !sessionsEqual(out, want) {
			t.Errorf("CreateSession = %+v, want %+v", out, want)
		}
		got, err := db.GetSession(ctx, "acme", "vm_a", "ses_1")
		if err != nil {
			t.Fatalf("GetSession: %v", err)
		}
		if !sessionsEqual(got, want) || got.CreatedAt.Location() != time.UTC {
			t.Errorf("GetSession = %+v, want %+v", got, want)
		}

		// Defaults: idle, times now, no directories as an empty list, no
		// permission default as nil.
		bare := mustSession(t, db, gateway.Session{ID: "ses_2", TenantID: "acme", VMID: "vm_a", Agent: "codex"})
		got, err = db.GetSession(ctx, "acme", "vm_a", "ses_2")
		if err != nil {
			t.Fatalf("GetSession(bare): %v", err)
		}
		if got.State != gateway.SessionIdle || got.AdditionalDirectories == nil || len(got.AdditionalDirectories) != 0 ||
			got.PermissionDefault != nil || got.LatestSequence != 0 || got.PendingPermissions != nil ||
			!got.CreatedAt.Equal(db.now()) || !got.UpdatedAt.Equal(db.now()) || !sessionsEqual(got, bare) {
			t.Errorf("GetSession(bare) = %+v, CreateSession returned %+v", got, bare)
		}

		// The same ID on another VM is another session.
		mustVM(t, db, "acme", "vm_b", gateway.VMReady)
		mustSession(t, db, gateway.Session{ID: "ses_1", TenantID: "acme", VMID: "vm_b", Agent: "claude"})

		errTests := []struct {
			name string
			s    gateway.Session
			code gateway.Code
		}{
			{"existing", gateway.Session{ID: "ses_1", TenantID: "acme", VMID: "vm_a"}, gateway.CodeConflict},
			{"unknown vm", gateway.Session{ID: "ses_9", TenantID: "acme", VMID: "vm_missing"}, gateway.CodeNotFound},
			{"other tenant's vm", gateway.Session{ID: "ses_9", TenantID: "acme", VMID: "vm_g"}, gateway.CodeNotFound},
			{"running", gateway.Session{ID: "ses_9", TenantID: "acme", VMID: "vm_a", State: gateway.SessionRunning}, gateway.CodeInvalidArgument},
			{"no id", gateway.Session{TenantID: "acme", VMID: "vm_a"}, gateway.CodeInvalidArgument},
			{"no tenant", gateway.Session{ID: "ses_9", VMID: "vm_a"}, gateway.CodeInvalidArgument},
			{"huge sequence", gateway.Session{ID: "ses_9", TenantID: "acme", VMID: "vm_a", LatestSequence: math.MaxUint64}, gateway.CodeInvalidArgument},
		}
		for _, tt := range errTests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := db.CreateSession(ctx, tt.s)
				wantCode(t, err, tt.code)
			})
		}
		if _, err := db.GetSession(ctx, "acme", "vm_a", "ses_9"); gateway.ErrorCode(err) != gateway.CodeNotFound {
			t.Errorf("a failed CreateSession stored ses_9: %v", err)
		}

		for _, get := range []struct{ tenant, vm, id string }{
			{"globex", "vm_a", "ses_1"}, // another tenant's
			{"acme", "vm_g", "ses_1"},
			{"acme", "vm_a", "ses_missing"},
			{"acme", "vm_missing", "ses_1"},
		} {
			_, err := db.GetSession(ctx, get.tenant, get.vm, get.id)
			wantCode(t, err, gateway.CodeNotFound)
		}

		// SetSessionState stores idle or unloaded and moves updated_at.
		db.now = func() time.Time { return created.Add(2 * time.Hour).UTC().Truncate(time.Microsecond) }
		if err := db.SetSessionState(ctx, "vm_a", "ses_1", gateway.SessionIdle); err != nil {
			t.Fatalf("SetSessionState: %v", err)
		}
		got, _ = db.GetSession(ctx, "acme", "vm_a", "ses_1")
		want.State, want.UpdatedAt = gateway.SessionIdle, db.now()
		if !sessionsEqual(got, want) {
			t.Errorf("after SetSessionState = %+v, want %+v", got, want)
		}
		wantCode(t, db.SetSessionState(ctx, "vm_a", "ses_missing", gateway.SessionIdle), gateway.CodeNotFound)
		for _, bad := range []gateway.SessionState{gateway.SessionRunning, gateway.SessionWaiting, gateway.SessionClosed, gateway.SessionLost, "", "bogus"} {
			wantCode(t, db.SetSessionState(ctx, "vm_a", "ses_1", bad), gateway.CodeInvalidArgument)
		}
	})
}

func TestListSessionsPagination(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")
		mustVM(t, db, "acme", "vm_a", gateway.VMReady)
		mustVM(t, db, "acme", "vm_b", gateway.VMReady)
		mustVM(t, db, "globex", "vm_g", gateway.VMReady)

		// Sessions share creation times in threes, so that the ID breaks ties.
		base := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		for i := range 7 {
			mustSession(t, db, gateway.Session{ID: fmt.Sprintf("ses_%02d", 7-i), TenantID: "acme", VMID: "vm_a",
				CreatedAt: base.Add(time.Duration(i/3) * time.Millisecond)})
		}
		// Noise: another VM of the tenant, and another tenant.
		mustSession(t, db, gateway.Session{ID: "ses_00", TenantID: "acme", VMID: "vm_b", CreatedAt: base})
		mustSession(t, db, gateway.Session{ID: "ses_00", TenantID: "globex", VMID: "vm_g", CreatedAt: base})
		want := []string{"ses_05", "ses_06", "ses_07", "ses_02", "ses_03", "ses_04", "ses_01"}

		for _, limit := range []int{1, 2, 3, 7, 0, 1000} {
			t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
				var got []string
				cursor := ""
				for pages := 1; ; pages++ {
					page, err := db.ListSessions(ctx, "acme", "vm_a", cursor, limit)
					if err != nil {
						t.Fatalf("ListSessions: %v", err)
					}
					if page.NextCursor != "" && len(page.Items) != limit {
						t.Fatalf("page %d has %d items and a next page, limit %d", pages, len(page.Items), limit)
					}
					for _, s := range page.Items {
						if s.VMID != "vm_a" || s.TenantID != "acme" {
							t.Fatalf("listed %+v", s)
						}
						got = append(got, s.ID)
					}
					if page.NextCursor == "" {
						break
					}
					if pages > 10 {
						t.Fatal("too many pages")
					}
					cursor = page.NextCursor
				}
				if !slices.Equal(got, want) {
					t.Fatalf("walked %v, want %v", got, want)
				}
			})
		}

		for _, empty := range []struct{ tenant, vm string }{{"globex", "vm_a"}, {"acme", "vm_missing"}, {"acme", "vm_g"}} {
			page, err := db.ListSessions(ctx, empty.tenant, empty.vm, "", 10)
			if err != nil || page.Items == nil || len(page.Items) != 0 || page.NextCursor != "" {
				t.Errorf("ListSessions(%s, %s) = %+v, %v; want an empty non-nil page", empty.tenant, empty.vm, page, err)
			}
		}
		_, err := db.ListSessions(ctx, "acme", "vm_a", "not-a-cursor", 3)
		wantCode(t, err, gateway.CodeInvalidArgument)
	})
}

func TestAppendSessionEvents(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustVM(t, db, "acme", "vm_a", gateway.VMReady)
		t0 := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
		db.now = func() time.Time { return t0 }
		mustSession(t, db, gateway.Session{ID: "s1", TenantID: "acme", VMID: "vm_a"})
		mustSession(t, db, gateway.Session{ID: "s2", TenantID: "acme", VMID: "vm_a"})

		at := time.Date(2025, 3, 1, 1, 2, 3, 456789999, time.FixedZone("X", 3600))
		batch := []gateway.SessionEvent{
			event("vm_a", "s1", 2, at), event("vm_a", "s1", 1, at), event("vm_a", "s2", 1, at), event("vm_a", "s1", 3, at),
		}
		db.now = func() time.Time { return t0.Add(time.Minute) }
		if err := db.AppendSessionEvents(ctx, batch...); err != nil {
			t.Fatalf("AppendSessionEvents: %v", err)
		}
		latest := func(id string) (uint64, time.Time) {
			t.Helper()
			s, err := db.GetSession(ctx, "acme", "vm_a", id)
			if err != nil {
				t.Fatalf("GetSession(%s): %v", id, err)
			}
			return s.LatestSequence, s.UpdatedAt
		}
		if seq, upd := latest("s1"); seq != 3 || !upd.Equal(t0.Add(time.Minute)) {
			t.Errorf("s1 latest %d updated %v, want 3 and %v", seq, upd, t0.Add(time.Minute))
		}
		if seq, _ := latest("s2"); seq != 1 {
			t.Errorf("s2 latest %d, want 1", seq)
		}

		// The events read back byte for byte, times to the microsecond.
		page, err := db.SessionHistory(ctx, "vm_a", "s1", gateway.HistoryQuery{})
		if err != nil {
			t.Fatalf("SessionHistory: %v", err)
		}
		if len(page.Events) != 3 {
			t.Fatalf("history %v, want 3 events", seqs(page.Events))
		}
		for i, e := range page.Events {
			want := event("vm_a", "s1", uint64(i+1), at.UTC().Truncate(time.Microsecond))
			if string(e.Data) != string(want.Data) || e.Type != want.Type || e.VMID != "vm_a" || e.SessionID != "s1" ||
				e.Sequence != want.Sequence || !e.Time.Equal(want.Time) || e.Time.Location() != time.UTC {
				t.Errorf("event %d = %+v (%s), want %+v (%s)", i, e, e.Data, want, want.Data)
			}
		}

		// A replay, even with other data, changes no stored event; a lower
		// sequence does not lower latest_sequence.
		replay := event("vm_a", "s1", 2, at)
		replay.Data = json.RawMessage(`{"replayed":true}`)
		db.now = func() time.Time { return t0.Add(2 * time.Minute) }
		if err := db.AppendSessionEvents(ctx, replay, event("vm_a", "s1", 1, at)); err != nil {
			t.Fatalf("AppendSessionEvents(replay): %v", err)
		}
		if seq, upd := latest("s1"); seq != 3 || !upd.Equal(t0.Add(2*time.Minute)) {
			t.Errorf("s1 after replay: latest %d updated %v, want 3 and %v", seq, upd, t0.Add(2*time.Minute))
		}
		page, _ = db.SessionHistory(ctx, "vm_a", "s1", gateway.HistoryQuery{})
		if len(page.Events) != 3 || string(page.Events[1].Data) != string(event("vm_a", "s1", 2, at).Data) {
			t.Errorf("replay changed the history: %v", page.Events)
		}

		// An unknown session rejects the whole batch, whatever its order.
		for _, bad := range [][]gateway.SessionEvent{
			{event("vm_a", "s1", 10, at), event("vm_a", "s_missing", 1, at)},
			{event("vm_a", "s_missing", 1, at), event("vm_a", "s1", 10, at)},
			{event("vm_a", "s1", 10, at), event("vm_other", "s1", 1, at)},
		} {
			wantCode(t, db.AppendSessionEvents(ctx, bad...), gateway.CodeNotFound)
		}
		bigSeq := event("vm_a", "s1", math.MaxInt64+1, at)
		wantCode(t, db.AppendSessionEvents(ctx, event("vm_a", "s1", 10, at), bigSeq), gateway.CodeInvalidArgument)
		if seq, upd := latest("s1"); seq != 3 || !upd.Equal(t0.Add(2*time.Minute)) {
			t.Errorf("a rejected batch changed s1: latest %d updated %v", seq, upd)
		}
		if page, _ := db.SessionHistory(ctx, "vm_a", "s1", gateway.HistoryQuery{}); !slices.Equal(seqs(page.Events), []uint64{1, 2, 3}) {
			t.Errorf("a rejected batch was stored: %v", seqs(page.Events))
		}

		// Nothing to append is nothing to do; nil Data is JSON null; the
		// largest storable sequence round-trips.
		if err := db.AppendSessionEvents(ctx); err != nil {
			t.Errorf("AppendSessionEvents(): %v", err)
		}
		if err := db.AppendSessionEvents(ctx, gateway.SessionEvent{VMID: "vm_a", SessionID: "s2", Sequence: math.MaxInt64, Type: "x"}); err != nil {
			t.Fatalf("AppendSessionEvents(max): %v", err)
		}
		page, _ = db.SessionHistory(ctx, "vm_a", "s2", gateway.HistoryQuery{After: 1})
		if len(page.Events) != 1 || page.Events[0].Sequence != math.MaxInt64 || string(page.Events[0].Data) != "null" ||
			!page.Events[0].Time.Equal(t0.Add(2*time.Minute)) {
			t.Errorf("max event = %+v", page.Events)
		}
		if seq, _ := latest("s2"); seq != math.MaxInt64 {
			t.Errorf("s2 latest %d, want MaxInt64", seq)
		}
	})
}

func TestSessionHistory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustVM(t, db, "acme", "vm_a", gateway.VMReady)
		mustSession(t, db, gateway.Session{ID: "s1", TenantID: "acme", VMID: "vm_a"})
		mustSession(t, db, gateway.Session{ID: "big", TenantID: "acme", VMID: "vm_a"})
		mustSession(t, db, gateway.Session{ID: "sparse", TenantID: "acme", VMID: "vm_a"})
		at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		var events []gateway.SessionEvent
		for i := uint64(1); i <= 10; i++ {
			events = append(events, event("vm_a", "s1", i, at))
		}
		for i := uint64(1); i <= 1100; i++ {
			events = append(events, event("vm_a", "big", i, at))
		}
		for _, i := range []uint64{5, 10, 15, 20} {
			events = append(events, event("vm_a", "sparse", i, at))
		}
		if err := db.AppendSessionEvents(ctx, events...); err != nil {
			t.Fatalf("AppendSessionEvents: %v", err)
		}
		span := func(from, to uint64) []uint64 {
			out := []uint64{}
			for i := from; i <= to; i++ {
				out = append(out, i)
			}
			return out
		}

		tests := []struct {
			session           string
			q                 gateway.HistoryQuery
			want              []uint64
			moreBefore, after bool
		}{
			{"s1", gateway.HistoryQuery{}, span(1, 10), false, false},
			{"s1", gateway.HistoryQuery{Limit: 3}, span(1, 3), false, true},
			{"s1", gateway.HistoryQuery{After: 5, Limit: 2}, span(6, 7), true, true},
			{"s1", gateway.HistoryQuery{After: 8, Limit: 1000}, span(9, 10), true, false},
			{"s1", gateway.HistoryQuery{After: 10}, span(1, 0), true, false},
			{"s1", gateway.HistoryQuery{After: 20}, span(1, 0), true, false},
			{"s1", gateway.HistoryQuery{After: math.MaxUint64}, span(1, 0), true, false},
			{"s1", gateway.HistoryQuery{Before: 4, Limit: 10}, span(1, 3), false, true},
			{"s1", gateway.HistoryQuery{Before: 4, Limit: 2}, span(2, 3), true, true},
			{"s1", gateway.HistoryQuery{Before: 11, Limit: 3}, span(8, 10), true, false},
			{"s1", gateway.HistoryQuery{Before: 1}, span(1, 0), false, true},
			{"s1", gateway.HistoryQuery{Before: math.MaxUint64, Limit: 2}, span(9, 10), true, false},
			{"s1", gateway.HistoryQuery{After: 3, Before: 6}, span(4, 5), true, true},
			{"s1", gateway.HistoryQuery{After: 3, Before: 9, Limit: 2}, span(4, 5), true, true},
			{"s1", gateway.HistoryQuery{After: 3, Before: 4}, span(1, 0), true, true},
			{"s1", gateway.HistoryQuery{After: 0, Before: 11, Limit: 100}, span(1, 10), false, false},
			{"s1", gateway.HistoryQuery{Limit: -1}, span(1, 10), false, false},
			{"big", gateway.HistoryQuery{}, span(1, 100), false, true},
			{"big", gateway.HistoryQuery{Limit: 5000}, span(1, 1000), false, true},
			{"big", gateway.HistoryQuery{Before: 1101, Limit: 5000}, span(101, 1100), true, false},
			{"big", gateway.HistoryQuery{After: 1000, Limit: 5000}, span(1001, 1100), true, false},
			{"sparse", gateway.HistoryQuery{After: 6, Limit: 1}, []uint64{10}, true, true},
			{"sparse", gateway.HistoryQuery{After: 11, Before: 14}, span(1, 0), true, true},
			{"sparse", gateway.HistoryQuery{Before: 5}, span(1, 0), false, true},
			{"sparse", gateway.HistoryQuery{After: 20}, span(1, 0), true, false},
			{"missing", gateway.HistoryQuery{}, span(1, 0), false, false},
			{"missing", gateway.HistoryQuery{After: 3, Before: 6}, span(1, 0), false, false},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/after=%d,before=%d,limit=%d", tt.session, tt.q.After, tt.q.Before, tt.q.Limit), func(t *testing.T) {
				page, err := db.SessionHistory(ctx, "vm_a", tt.session, tt.q)
				if err != nil {
					t.Fatalf("SessionHistory: %v", err)
				}
				if page.Events == nil {
					t.Error("Events is nil, want a non-nil slice")
				}
				got := seqs(page.Events)
				if !slices.Equal(got, tt.want) || page.HasMoreBefore != tt.moreBefore || page.HasMoreAfter != tt.after {
					t.Errorf("got %v before=%v after=%v; want %v before=%v after=%v",
						got, page.HasMoreBefore, page.HasMoreAfter, tt.want, tt.moreBefore, tt.after)
				}
			})
		}
	})
}

func TestSessionPermissions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustVM(t, db, "acme", "vm_a", gateway.VMReady)
		mustVM(t, db, "acme", "vm_b", gateway.VMReady)
		for _, s := range []struct{ vm, id string }{{"vm_a", "s1"}, {"vm_a", "s2"}, {"vm_b", "s1"}} {
			mustSession(t, db, gateway.Session{ID: s.id, TenantID: "acme", VMID: s.vm})
		}
		t0 := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
		db.now = func() time.Time { return t0 }
		opts := json.RawMessage(`[{"optionId":"allow", "kind":"allow_once"},{"optionId":"reject","kind":"reject_once"}]`)
		tool := json.RawMessage(`{"toolCallId":"tc1",  "title":"rm -rf /tmp/x"}`)
		perm := func(id string, asked time.Time) gateway.Permission {
			return gateway.Permission{RequestID: id, Options: opts, ToolCall: tool, AskedAt: asked}
		}
		for _, p := range []gateway.Permission{perm("r1", t0.Add(time.Second)), perm("r2", t0.Add(2*time.Second)), perm("r0", t0)} {
			if err := db.AddPermission(ctx, "vm_a", "s1", p); err != nil {
				t.Fatalf("AddPermission(%s): %v", p.RequestID, err)
			}
		}
		// Added again, even differently: left as it is.
		again := perm("r1", t0.Add(time.Hour))
		again.Options = json.RawMessage(`[]`)
		if err := db.AddPermission(ctx, "vm_a", "s1", again); err != nil {
			t.Fatalf("AddPermission(again): %v", err)
		}
		// Nil options and tool call are JSON null; a zero AskedAt is now.
		if err := db.AddPermission(ctx, "vm_a", "s2", gateway.Permission{RequestID: "q1"}); err != nil {
			t.Fatalf("AddPermission(bare): %v", err)
		}
		if err := db.AddPermission(ctx, "vm_b", "s1", perm("b1", t0)); err != nil {
			t.Fatalf("AddPermission(vm_b): %v", err)
		}

		list := func(vm, session string, pendingOnly bool) []gateway.Permission {
			t.Helper()
			ps, err := db.Permissions(ctx, vm, session, pendingOnly)
			if err != nil {
				t.Fatalf("Permissions: %v", err)
			}
			return ps
		}
		ids := func(ps []gateway.Permission) string {
			var out []string
			for _, p := range ps {
				out = append(out, p.RequestID+":"+p.Status)
			}
			return strings.Join(out, ",")
		}
		all := list("vm_a", "s1", false)
		if ids(all) != "r0:pending,r1:pending,r2:pending" {
			t.Fatalf("Permissions = %s", ids(all))
		}
		for _, p := range all {
			if string(p.Options) != string(opts) || string(p.ToolCall) != string(tool) || p.Decision != nil || p.AskedAt.Location() != time.UTC {
				t.Errorf("permission %s = %+v", p.RequestID, p)
			}
		}
		if !all[1].AskedAt.Equal(t0.Add(time.Second)) {
			t.Errorf("r1 asked at %v, want %v (the first add)", all[1].AskedAt, t0.Add(time.Second))
		}
		bare := list("vm_a", "s2", false)
		if len(bare) != 1 || string(bare[0].Options) != "null" || string(bare[0].ToolCall) != "null" || !bare[0].AskedAt.Equal(t0) {
			t.Errorf("bare permission = %+v", bare)
		}

		// Resolve: the decision and status are stored; an unknown request is
		// created with the decision.
		answer := gateway.PermissionDecision{By: gateway.DecidedByAPI, KeyID: "key_1", OptionID: "allow", Status: "accepted",
			At: time.Date(2025, 5, 1, 12, 0, 5, 123456789, time.UTC)}
		if err := db.ResolvePermission(ctx, "vm_a", "s1", "r1", gateway.PermissionAnswered, answer); err != nil {
			t.Fatalf("ResolvePermission: %v", err)
		}
		timeout := gateway.PermissionDecision{By: gateway.DecidedByTimeout, OptionID: "reject", Status: "accepted", Reason: "no answer",
			At: t0.Add(10 * time.Second)}
		if err := db.ResolvePermission(ctx, "vm_a", "s1", "r9", gateway.PermissionDropped, timeout); err != nil {
			t.Fatalf("ResolvePermission(unknown request): %v", err)
		}
		all = list("vm_a", "s1", false)
		if ids(all) != "r0:pending,r1:answered,r2:pending,r9:dropped" {
			t.Fatalf("Permissions after resolving = %s", ids(all))
		}
		wantAnswer := answer
		wantAnswer.At = answer.At.Truncate(time.Microsecond)
		if !decisionEqual(all[1].Decision, wantAnswer) || string(all[1].Options) != string(opts) {
			t.Errorf("r1 = %+v, decision %+v; want %+v", all[1], all[1].Decision, wantAnswer)
		}
		if r9 := all[3]; !decisionEqual(r9.Decision, timeout) || !r9.AskedAt.Equal(timeout.At) ||
			string(r9.Options) != "null" || string(r9.ToolCall) != "null" {
			t.Errorf("r9 = %+v, decision %+v", r9, r9.Decision)
		}
		if got := ids(list("vm_a", "s1", true)); got != "r0:pending,r2:pending" {
			t.Errorf("pending = %s", got)
		}

		errTests := []struct {
			name string
			err  error
			code gateway.Code
		}{
			{"add to unknown session", db.AddPermission(ctx, "vm_a", "s_missing", perm("x", t0)), gateway.CodeNotFound},
			{"add without id", db.AddPermission(ctx, "vm_a", "s1", gateway.Permission{}), gateway.CodeInvalidArgument},
			{"add with bad status", db.AddPermission(ctx, "vm_a", "s1", gateway.Permission{RequestID: "x", Status: "bogus"}), gateway.CodeInvalidArgument},
			{"resolve in unknown session", db.ResolvePermission(ctx, "vm_x", "s1", "r1", gateway.PermissionAnswered, answer), gateway.CodeNotFound},
			{"resolve as pending", db.ResolvePermission(ctx, "vm_a", "s1", "r0", gateway.PermissionPending, answer), gateway.CodeInvalidArgument},
			{"resolve without id", db.ResolvePermission(ctx, "vm_a", "s1", "", gateway.PermissionAnswered, answer), gateway.CodeInvalidArgument},
		}
		for _, tt := range errTests {
			t.Run(tt.name, func(t *testing.T) { wantCode(t, tt.err, tt.code) })
		}

		// Drop: every pending request of every session of the VM, no other.
		drop := gateway.PermissionDecision{By: gateway.DecidedByAgent, Status: "not_pending", Reason: "vm disposed"}
		db.now = func() time.Time { return t0.Add(time.Minute) }
		n, err := db.DropPendingPermissions(ctx, "vm_a", drop)
		if err != nil || n != 3 { // r0, r2 of s1, q1 of s2
			t.Fatalf("DropPendingPermissions = %d, %v; want 3", n, err)
		}
		wantDrop := drop
		wantDrop.At = t0.Add(time.Minute)
		for _, s := range []string{"s1", "s2"} {
			for _, p := range list("vm_a", s, false) {
				switch {
				case p.Status == gateway.PermissionPending:
					t.Errorf("%s/%s is still pending", s, p.RequestID)
				case p.RequestID == "r1" && !decisionEqual(p.Decision, wantAnswer), p.RequestID == "r9" && !decisionEqual(p.Decision, timeout):
					t.Errorf("%s/%s was resolved before and changed: %+v", s, p.RequestID, p.Decision)
				case (p.RequestID == "r0" || p.RequestID == "r2" || p.RequestID == "q1") &&
					(p.Status != gateway.PermissionDropped || !decisionEqual(p.Decision, wantDrop)):
					t.Errorf("%s/%s = %s %+v, want dropped %+v", s, p.RequestID, p.Status, p.Decision, wantDrop)
				}
			}
		}
		if got := ids(list("vm_b", "s1", true)); got != "b1:pending" {
			t.Errorf("vm_b's permissions = %s, want b1 pending", got)
		}
		if n, err := db.DropPendingPermissions(ctx, "vm_a", drop); err != nil || n != 0 {
			t.Errorf("DropPendingPermissions again = %d, %v", n, err)
		}
		if ps := list("vm_a", "s_missing", false); ps == nil || len(ps) != 0 {
			t.Errorf("Permissions(unknown session) = %#v, want empty non-nil", ps)
		}
	})
}

// decisionEqual tells whether got is want, their times compared with Equal.
func decisionEqual(got *gateway.PermissionDecision, want gateway.PermissionDecision) bool {
	if got == nil || !got.At.Equal(want.At) {
		return false
	}
	g := *got
	g.At = want.At
	return g == want
}

// countRows returns how many rows of table belong to a VM's session.
func countRows(t *testing.T, db *DB, table, vmID, sessionID string) int {
	t.Helper()
	var n int
	err := db.queryRow(testContext(t), db.r, `SELECT COUNT(*) FROM `+table+` WHERE vm_id = ? AND session_id = ?`, vmID, sessionID).Scan(&n)
	if err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func TestDeleteSessionCascades(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")
		mustVM(t, db, "acme", "vm_a", gateway.VMReady)
		mustSession(t, db, gateway.Session{ID: "s1", TenantID: "acme", VMID: "vm_a"})
		mustSession(t, db, gateway.Session{ID: "s2", TenantID: "acme", VMID: "vm_a"})
		at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, s := range []string{"s1", "s2"} {
			if err := db.AppendSessionEvents(ctx, event("vm_a", s, 1, at), event("vm_a", s, 2, at)); err != nil {
				t.Fatal(err)
			}
			if err := db.AddPermission(ctx, "vm_a", s, gateway.Permission{RequestID: "r1"}); err != nil {
				t.Fatal(err)
			}
		}

		wantCode(t, db.DeleteSession(ctx, "globex", "vm_a", "s1"), gateway.CodeNotFound) // another tenant's
		if err := db.DeleteSession(ctx, "acme", "vm_a", "s1"); err != nil {
			t.Fatalf("DeleteSession: %v", err)
		}
		wantCode(t, db.DeleteSession(ctx, "acme", "vm_a", "s1"), gateway.CodeNotFound)
		_, err := db.GetSession(ctx, "acme", "vm_a", "s1")
		wantCode(t, err, gateway.CodeNotFound)
		for _, table := range []string{"session_events", "session_permissions"} {
			if n := countRows(t, db, table, "vm_a", "s1"); n != 0 {
				t.Errorf("%s keeps %d rows of the deleted session", table, n)
			}
			if n := countRows(t, db, table, "vm_a", "s2"); n == 0 {
				t.Errorf("%s lost the rows of s2", table)
			}
		}

		// The ID can be reused, with a history of its own.
		mustSession(t, db, gateway.Session{ID: "s1", TenantID: "acme", VMID: "vm_a"})
		s, err := db.GetSession(ctx, "acme", "vm_a", "s1")
		if err != nil || s.LatestSequence != 0 {
			t.Fatalf("recreated session = %+v, %v", s, err)
		}
		page, err := db.SessionHistory(ctx, "vm_a", "s1", gateway.HistoryQuery{})
		if err != nil || len(page.Events) != 0 {
			t.Fatalf("recreated session's history = %v, %v", seqs(page.Events), err)
		}
	})
}

func TestPurgeExpiredSessions(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		now := time.Date(2025, 9, 1, 0, 0, 0, 0, time.UTC)
		days := func(n int) time.Time { return now.AddDate(0, 0, -n) }
		if _, err := db.CreateTenant(ctx, gateway.Tenant{ID: "ret", Sessions: gateway.SessionSettings{RetentionDays: 10}}); err != nil {
			t.Fatal(err)
		}
		mustTenant(t, db, "keep") // no retention
		mustVM(t, db, "ret", "vm_disposed", gateway.VMDisposed)
		mustVM(t, db, "ret", "vm_lost", gateway.VMLost)
		mustVM(t, db, "ret", "vm_ready", gateway.VMReady)
		mustVM(t, db, "keep", "vm_keep", gateway.VMDisposed)

		sessions := []struct {
			tenant, vm, id string
			updated        time.Time
			purged         bool
		}{
			{"ret", "vm_disposed", "old", days(20), true},
			{"ret", "vm_disposed", "edge", days(10).Add(-time.Microsecond), true},
			{"ret", "vm_disposed", "recent", days(5), false},
			{"ret", "vm_disposed", "at_cutoff", days(10), false},
			{"ret", "vm_lost", "old", days(30), true},
			{"ret", "vm_ready", "old", days(30), false},        // its VM lives
			{"ret", "vm_disposed", "touched", days(30), false}, // an event updates it below
			{"keep", "vm_keep", "old", days(1000), false},      // its tenant keeps sessions
		}
		for _, s := range sessions {
			mustSession(t, db, gateway.Session{ID: s.id, TenantID: s.tenant, VMID: s.vm, CreatedAt: days(2000), UpdatedAt: s.updated})
			if err := db.AppendSessionEvents(ctx, event(s.vm, s.id, 1, days(2000))); err != nil {
				t.Fatal(err)
			}
			if err := db.AddPermission(ctx, s.vm, s.id, gateway.Permission{RequestID: "r1"}); err != nil {
				t.Fatal(err)
			}
		}
		// AppendSessionEvents set updated_at to db.now(); put them back, but
		// let an event keep "touched" recent.
		for _, s := range sessions {
			if _, err := db.exec(ctx, db.w, `UPDATE agent_sessions SET updated_at = ? WHERE vm_id = ? AND id = ?`,
				db.d.ts(s.updated), s.vm, s.id); err != nil {
				t.Fatal(err)
			}
		}
		db.now = func() time.Time { return days(1) }
		if err := db.AppendSessionEvents(ctx, event("vm_disposed", "touched", 2, days(1))); err != nil {
			t.Fatal(err)
		}

		n, err := db.PurgeExpiredSessions(ctx, now)
		if err != nil || n != 3 {
			t.Fatalf("PurgeExpiredSessions = %d, %v; want 3", n, err)
		}
		for _, s := range sessions {
			_, err := db.GetSession(ctx, s.tenant, s.vm, s.id)
			switch {
			case s.purged && gateway.ErrorCode(err) != gateway.CodeNotFound:
				t.Errorf("%s/%s was kept (%v), want purged", s.vm, s.id, err)
			case !s.purged && err != nil:
				t.Errorf("%s/%s: %v, want kept", s.vm, s.id, err)
			}
			events, perms := countRows(t, db, "session_events", s.vm, s.id), countRows(t, db, "session_permissions", s.vm, s.id)
			if s.purged && (events != 0 || perms != 0) {
				t.Errorf("%s/%s purged but %d events and %d permissions remain", s.vm, s.id, events, perms)
			}
		}
		if n, err := db.PurgeExpiredSessions(ctx, now); err != nil || n != 0 {
			t.Errorf("PurgeExpiredSessions again = %d, %v; want 0", n, err)
		}
		// Far in the future, every session of an ended VM of "ret" goes.
		if n, err := db.PurgeExpiredSessions(ctx, now.AddDate(1, 0, 0)); err != nil || n != 3 {
			t.Errorf("PurgeExpiredSessions next year = %d, %v; want 3 (recent, at_cutoff, touched)", n, err)
		}
	})
}

// openAtVersion opens the database at dsn with only its first n migrations
// applied, as a gateway of schema version n left it, and returns every
// migration there is.
func openAtVersion(t *testing.T, dsn string, n int) (*DB, []migration) {
	t.Helper()
	ctx := testContext(t)
	kind, target, err := parseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var db *DB
	if kind == dialectPostgres {
		db, err = openPostgres(ctx, target)
	} else {
		db, err = openSQLite(ctx, target)
	}
	if err != nil {
		t.Fatal(err)
	}
	ms, err := loadMigrations(db.Dialect())
	if err != nil {
		t.Fatal(err)
	}
	if err := db.applyMigrations(ctx, ms[:n]); err != nil {
		t.Fatalf("apply the first %d migrations: %v", n, err)
	}
	if v, err := db.SchemaVersion(ctx); err != nil || v != n {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, n)
	}
	return db, ms
}

// TestSessionsMigrationOnExistingDatabase opens a database that a gateway of
// schema version 1 left with data: migration 0002 applies on top of it.
func TestSessionsMigrationOnExistingDatabase(t *testing.T) {
	forEachBackendDSN(t, func(t *testing.T, dsn string) {
		ctx := testContext(t)
		old, ms := openAtVersion(t, dsn, 1)
		// Version 1's tenants had no session columns.
		if _, err := old.exec(ctx, old.w, `INSERT INTO tenants (id, name, isolated, max_vms, max_processes, requests_per_second, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, "acme", "Acme", false, 2, 0, 0.0, old.d.ts(old.now()), old.d.ts(old.now())); err != nil {
			t.Fatalf("insert a version 1 tenant: %v", err)
		}
		// Written as version 1 wrote VMs: without the node column of 0004.
		if _, err := old.exec(ctx, old.w, `INSERT INTO vms (id, tenant_id, state, reason, sidecar_id, spec, created_at, updated_at)
			VALUES (?, ?, ?, '', '', '{}', ?, ?)`, "vm_a", "acme", string(gateway.VMReady), old.d.ts(old.now()), old.d.ts(old.now())); err != nil {
			t.Fatalf("insert a version 1 vm: %v", err)
		}
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}

		db := openTest(t, dsn)
		if v, err := db.SchemaVersion(ctx); err != nil || v != ms[len(ms)-1].version || v < 2 {
			t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, ms[len(ms)-1].version)
		}
		ten, err := db.GetTenant(ctx, "acme")
		if err != nil || ten.Quotas.MaxVMs != 2 || ten.Sessions.RetentionDays != 0 || ten.Sessions.PermissionDefault != nil {
			t.Fatalf("GetTenant after migrating = %+v, %v", ten, err)
		}
		if vm, err := db.GetVM(ctx, "acme", "vm_a"); err != nil || vm.Node != "" {
			t.Fatalf("GetVM after migrating = %+v, %v; want no node", vm, err)
		}
		mustSession(t, db, gateway.Session{ID: "s1", TenantID: "acme", VMID: "vm_a"})
		if err := db.AppendSessionEvents(ctx, event("vm_a", "s1", 1, time.Now())); err != nil {
			t.Fatalf("AppendSessionEvents: %v", err)
		}
		// And the old tenant takes the new settings.
		_, err = db.UpdateTenant(ctx, "acme", func(t *gateway.Tenant) error {
			t.Sessions.RetentionDays = 5
			return nil
		})
		if err != nil {
			t.Fatalf("UpdateTenant: %v", err)
		}
		if ten, _ := db.GetTenant(ctx, "acme"); ten.Sessions.RetentionDays != 5 {
			t.Errorf("retention = %d, want 5", ten.Sessions.RetentionDays)
		}
	})
}
