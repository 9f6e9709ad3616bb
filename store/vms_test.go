package store

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func testSpec() gateway.VMSpec {
	return gateway.VMSpec{
		Labels:              map[string]string{"team": "ml", "env": "dev"},
		Env:                 map[string]string{"HOME": "/home/agent"},
		Permissions:         map[string]any{"network": map[string]any{"allow": []any{"api.example.com"}}, "fs": "rw"},
		Limits:              map[string]any{"memoryMb": float64(512), "cpu": 1.5},
		LoopbackExemptPorts: []uint16{8080, 9090},
		Software:            []string{"python"},
		Agents:              []string{"claude"},
		IdleTimeoutSeconds:  300,
	}
}

func TestCreateAndGetVM(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		created := time.Date(2025, 6, 7, 8, 9, 10, 123456789, time.FixedZone("CEST", 2*3600))
		in := gateway.VM{ID: "vm_1", TenantID: "acme", SidecarID: "sc_1", Spec: testSpec(), CreatedAt: created}
		if err := db.CreateVM(ctx, in); err != nil {
			t.Fatalf("CreateVM: %v", err)
		}
		got, err := db.GetVM(ctx, "acme", "vm_1")
		if err != nil {
			t.Fatalf("GetVM: %v", err)
		}
		want := in
		want.State = gateway.VMCreating
		want.CreatedAt = created.UTC().Truncate(time.Microsecond)
		want.UpdatedAt = want.CreatedAt
		if !reflect.DeepEqual(got.Spec, want.Spec) {
			t.Errorf("spec = %#v, want %#v", got.Spec, want.Spec)
		}
		if got.ID != want.ID || got.TenantID != want.TenantID || got.State != want.State || got.SidecarID != "sc_1" ||
			!got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) || got.CreatedAt.Location() != time.UTC {
			t.Errorf("GetVM = %+v, want %+v", got, want)
		}

		wantCode(t, db.CreateVM(ctx, in), gateway.CodeConflict)
		wantCode(t, db.CreateVM(ctx, gateway.VM{ID: "vm_2", TenantID: "initech"}), gateway.CodeNotFound)
		wantCode(t, db.CreateVM(ctx, gateway.VM{ID: "vm_3", TenantID: "acme", State: "bogus"}), gateway.CodeInvalidArgument)
		wantCode(t, db.CreateVM(ctx, gateway.VM{TenantID: "acme"}), gateway.CodeInvalidArgument)
		_, err = db.GetVM(ctx, "acme", "vm_missing")
		wantCode(t, err, gateway.CodeNotFound)

		// A VM with an empty spec reads back as the zero spec.
		if err := db.CreateVM(ctx, gateway.VM{ID: "vm_bare", TenantID: "acme", State: gateway.VMReady}); err != nil {
			t.Fatal(err)
		}
		bare, err := db.GetVM(ctx, "acme", "vm_bare")
		if err != nil || bare.State != gateway.VMReady || !reflect.DeepEqual(bare.Spec, gateway.VMSpec{}) || bare.CreatedAt.IsZero() {
			t.Fatalf("GetVM(vm_bare) = %+v, %v", bare, err)
		}
	})
}

func TestVMTenantIsolation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")
		if err := db.CreateVM(ctx, gateway.VM{ID: "vm_a", TenantID: "acme", Spec: testSpec()}); err != nil {
			t.Fatal(err)
		}

		_, err := db.GetVM(ctx, "globex", "vm_a")
		wantCode(t, err, gateway.CodeNotFound)
		_, err = db.VMHistory(ctx, "globex", "vm_a")
		wantCode(t, err, gateway.CodeNotFound)
		page, err := db.ListVMs(ctx, gateway.VMFilter{TenantID: "globex"})
		if err != nil || len(page.Items) != 0 {
			t.Fatalf("ListVMs(globex) = %+v, %v; want nothing", page, err)
		}
		page, err = db.ListVMs(ctx, gateway.VMFilter{TenantID: "globex", Labels: map[string]string{"team": "ml"}})
		if err != nil || len(page.Items) != 0 {
			t.Fatalf("ListVMs(globex, label) = %+v, %v; want nothing", page, err)
		}
		if n, err := db.CountLiveVMs(ctx, "globex"); err != nil || n != 0 {
			t.Fatalf("CountLiveVMs(globex) = %d, %v", n, err)
		}
		// A second tenant cannot take the ID either: IDs are global.
		wantCode(t, db.CreateVM(ctx, gateway.VM{ID: "vm_a", TenantID: "globex"}), gateway.CodeConflict)

		if _, err := db.GetVM(ctx, "acme", "vm_a"); err != nil {
			t.Fatalf("GetVM(owner): %v", err)
		}
	})
}

func TestListVMsFiltersAndPagination(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")

		// 25 VMs of acme: VM i is created at base+i/2 seconds (pairs share a
		// time, so the ID decides their order), ready when i is even,
		// labelled team=ml when i%3 == 0 and env=prod when i%5 == 0.
		base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		type vmInfo struct {
			id      string
			created time.Time
			state   gateway.VMState
			labels  map[string]string
		}
		var all []vmInfo
		for i := range 25 {
			v := vmInfo{
				id:      fmt.Sprintf("vm_%02d", i),
				created: base.Add(time.Duration(i/2) * time.Second),
				state:   gateway.VMCreating,
				labels:  map[string]string{"n": fmt.Sprint(i)},
			}
			if i%2 == 0 {
				v.state = gateway.VMReady
			}
			if i%3 == 0 {
				v.labels["team"] = "ml"
			}
			if i%5 == 0 {
				v.labels["env"] = "prod"
			}
			all = append(all, v)
			err := db.CreateVM(ctx, gateway.VM{ID: v.id, TenantID: "acme", State: v.state, CreatedAt: v.created,
				Spec: gateway.VMSpec{Labels: v.labels}})
			if err != nil {
				t.Fatalf("CreateVM: %v", err)
			}
		}
		// Noise of another tenant with the same labels.
		for i := range 5 {
			err := db.CreateVM(ctx, gateway.VM{ID: fmt.Sprintf("other_%d", i), TenantID: "globex", State: gateway.VMReady,
				CreatedAt: base.Add(time.Duration(i) * time.Second), Spec: gateway.VMSpec{Labels: map[string]string{"team": "ml", "env": "prod"}}})
			if err != nil {
				t.Fatalf("CreateVM: %v", err)
			}
		}
		// Newest first; ties by ID, descending.
		sort.Slice(all, func(i, j int) bool {
			if !all[i].created.Equal(all[j].created) {
				return all[i].created.After(all[j].created)
			}
			return all[i].id > all[j].id
		})
		expect := func(keep func(vmInfo) bool) []string {
			ids := []string{}
			for _, v := range all {
				if keep(v) {
					ids = append(ids, v.id)
				}
			}
			return ids
		}

		tests := []struct {
			name   string
			filter gateway.VMFilter
			want   []string
		}{
			{"all", gateway.VMFilter{}, expect(func(vmInfo) bool { return true })},
			{"every state", gateway.VMFilter{States: gateway.AllStates}, expect(func(vmInfo) bool { return true })},
			{"ready", gateway.VMFilter{States: []gateway.VMState{gateway.VMReady}}, expect(func(v vmInfo) bool { return v.state == gateway.VMReady })},
			{"disposed", gateway.VMFilter{States: []gateway.VMState{gateway.VMDisposed}}, []string{}},
			{"team!=ml", gateway.VMFilter{NotLabels: map[string]string{"team": "ml"}},
				expect(func(v vmInfo) bool { return v.labels["team"] != "ml" })},
			{"team=ml,env!=prod", gateway.VMFilter{Labels: map[string]string{"team": "ml"}, NotLabels: map[string]string{"env": "prod"}},
				expect(func(v vmInfo) bool { return v.labels["team"] == "ml" && v.labels["env"] != "prod" })},
			{"team=ml", gateway.VMFilter{Labels: map[string]string{"team": "ml"}},
				expect(func(v vmInfo) bool { return v.labels["team"] == "ml" })},
			{"team=ml,env=prod", gateway.VMFilter{Labels: map[string]string{"team": "ml", "env": "prod"}},
				expect(func(v vmInfo) bool { return v.labels["team"] == "ml" && v.labels["env"] == "prod" })},
			{"ready,team=ml", gateway.VMFilter{States: []gateway.VMState{gateway.VMReady}, Labels: map[string]string{"team": "ml"}},
				expect(func(v vmInfo) bool { return v.state == gateway.VMReady && v.labels["team"] == "ml" })},
			{"team=other", gateway.VMFilter{Labels: map[string]string{"team": "other"}}, []string{}},
			{"n=7", gateway.VMFilter{Labels: map[string]string{"n": "7"}}, []string{"vm_07"}},
		}
		for _, tt := range tests {
			for _, limit := range []int{10, 3, 1000} {
				t.Run(fmt.Sprintf("%s/limit=%d", tt.name, limit), func(t *testing.T) {
					f := tt.filter
					f.TenantID, f.Limit = "acme", limit
					got := []string{}
					seen := map[string]bool{}
					for pages := 1; ; pages++ {
						page, err := db.ListVMs(ctx, f)
						if err != nil {
							t.Fatalf("ListVMs: %v", err)
						}
						if page.NextCursor != "" && len(page.Items) != min(limit, 500) {
							t.Fatalf("page %d: %d items and a next page, limit %d", pages, len(page.Items), limit)
						}
						for _, vm := range page.Items {
							if seen[vm.ID] {
								t.Fatalf("%s returned twice", vm.ID)
							}
							seen[vm.ID] = true
							got = append(got, vm.ID)
						}
						if page.NextCursor == "" {
							break
						}
						if pages > 30 {
							t.Fatal("pagination does not end")
						}
						f.Cursor = page.NextCursor
					}
					if !reflect.DeepEqual(got, tt.want) {
						t.Fatalf("got %v\nwant %v", got, tt.want)
					}
				})
			}
		}

		page, err := db.ListVMs(ctx, gateway.VMFilter{TenantID: "acme"})
		if err != nil || len(page.Items) != 25 || page.NextCursor != "" {
			t.Fatalf("default limit: %d items, cursor %q, %v", len(page.Items), page.NextCursor, err)
		}
		for _, f := range []gateway.VMFilter{
			{TenantID: "acme", Cursor: "garbage"},
			{TenantID: "acme", States: []gateway.VMState{"bogus"}},
			{TenantID: "acme", Labels: manyLabels(gateway.MaxLabelSelectors + 1)},
			{},
		} {
			_, err := db.ListVMs(ctx, f)
			wantCode(t, err, gateway.CodeInvalidArgument)
		}
	})
}

func manyLabels(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

func TestListVMsHidesEndedByDefault(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		for _, vm := range []gateway.VM{
			{ID: "vm_live", TenantID: "acme", State: gateway.VMReady},
			{ID: "vm_gone", TenantID: "acme", State: gateway.VMDisposed},
			{ID: "vm_lost", TenantID: "acme", State: gateway.VMLost},
		} {
			if err := db.CreateVM(ctx, vm); err != nil {
				t.Fatal(err)
			}
		}
		ids := func(f gateway.VMFilter) []string {
			t.Helper()
			f.TenantID = "acme"
			page, err := db.ListVMs(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			out := []string{}
			for _, vm := range page.Items {
				out = append(out, vm.ID)
			}
			sort.Strings(out)
			return out
		}
		if got := ids(gateway.VMFilter{}); !reflect.DeepEqual(got, []string{"vm_live"}) {
			t.Errorf("default list = %v, want only the live VM", got)
		}
		if got := ids(gateway.VMFilter{States: []gateway.VMState{gateway.VMDisposed, gateway.VMLost}}); !reflect.DeepEqual(got, []string{"vm_gone", "vm_lost"}) {
			t.Errorf("ended list = %v", got)
		}
		if got := ids(gateway.VMFilter{States: gateway.AllStates}); len(got) != 3 {
			t.Errorf("all states = %v", got)
		}
	})
}

func TestDeleteVM(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")
		for _, vm := range []gateway.VM{
			{ID: "vm_live", TenantID: "acme", State: gateway.VMReady, Spec: gateway.VMSpec{Labels: map[string]string{"a": "b"}}},
			{ID: "vm_gone", TenantID: "acme", State: gateway.VMDisposed, Spec: gateway.VMSpec{Labels: map[string]string{"a": "b"}}},
		} {
			if err := db.CreateVM(ctx, vm); err != nil {
				t.Fatal(err)
			}
		}
		del := func(tenant, id string) error {
			_, err := db.DeleteVM(ctx, tenant, id)
			return err
		}
		wantCode(t, del("acme", "vm_live"), gateway.CodeConflict)
		wantCode(t, del("globex", "vm_gone"), gateway.CodeNotFound)
		if err := del("acme", "vm_gone"); err != nil {
			t.Fatalf("delete an ended record: %v", err)
		}
		wantCode(t, del("acme", "vm_gone"), gateway.CodeNotFound)
		_, err := db.GetVM(ctx, "acme", "vm_gone")
		wantCode(t, err, gateway.CodeNotFound)
		if _, err := db.GetVM(ctx, "acme", "vm_live"); err != nil {
			t.Fatalf("the live VM went too: %v", err)
		}
	})
}

func TestPurgeEndedVMs(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		old := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		recent := old.Add(48 * time.Hour)
		for _, vm := range []gateway.VM{
			{ID: "vm_old_gone", TenantID: "acme", State: gateway.VMDisposed, CreatedAt: old},
			{ID: "vm_old_lost", TenantID: "acme", State: gateway.VMLost, CreatedAt: old},
			{ID: "vm_old_live", TenantID: "acme", State: gateway.VMReady, CreatedAt: old},
			{ID: "vm_recent", TenantID: "acme", State: gateway.VMDisposed, CreatedAt: recent},
			{ID: "vm_old_session", TenantID: "acme", State: gateway.VMDisposed, CreatedAt: old},
		} {
			if err := db.CreateVM(ctx, vm); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.CreateSession(ctx, gateway.Session{ID: "s1", VMID: "vm_old_session", TenantID: "acme", Agent: "pi"}); err != nil {
			t.Fatal(err)
		}
		n, err := db.PurgeEndedVMs(ctx, old.Add(24*time.Hour))
		if err != nil || n != 2 {
			t.Fatalf("PurgeEndedVMs = %d, %v; want the two old ended VMs without sessions", n, err)
		}
		for id, want := range map[string]bool{"vm_old_gone": false, "vm_old_lost": false, "vm_old_live": true, "vm_recent": true, "vm_old_session": true} {
			_, err := db.GetVM(ctx, "acme", id)
			if got := err == nil; got != want {
				t.Errorf("%s kept = %v, want %v (%v)", id, got, want, err)
			}
		}
	})
}

func TestListVMsLimitCap(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		for i := range 502 {
			if err := db.CreateVM(ctx, gateway.VM{ID: fmt.Sprintf("vm_%03d", i), TenantID: "acme"}); err != nil {
				t.Fatal(err)
			}
		}
		page, err := db.ListVMs(ctx, gateway.VMFilter{TenantID: "acme", Limit: 10000})
		if err != nil || len(page.Items) != 500 || page.NextCursor == "" {
			t.Fatalf("limit 10000: %d items, cursor %q, %v; want 500 and a next page", len(page.Items), page.NextCursor, err)
		}
		page, err = db.ListVMs(ctx, gateway.VMFilter{TenantID: "acme", Limit: -1})
		if err != nil || len(page.Items) != 50 {
			t.Fatalf("limit -1: %d items, %v; want the default 50", len(page.Items), err)
		}
	})
}

func TestSetVMState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		t0 := time.Date(2025, 2, 3, 4, 5, 6, 0, time.UTC)
		if err := db.CreateVM(ctx, gateway.VM{ID: "vm_1", TenantID: "acme", CreatedAt: t0, SidecarID: "sc_0"}); err != nil {
			t.Fatal(err)
		}

		steps := []struct {
			to      gateway.VMState
			reason  string
			sidecar string
			want    string // sidecar afterwards
		}{
			{gateway.VMReady, "", "sc_1", "sc_1"},
			{gateway.VMReady, "reattached", "", "sc_1"}, // empty keeps the sidecar
			{gateway.VMDisposing, "idle", "", "sc_1"},
			{gateway.VMDisposed, "idle", "", "sc_1"},
		}
		for i, s := range steps {
			at := t0.Add(time.Duration(i+1) * time.Minute)
			db.now = func() time.Time { return at }
			vm, err := db.SetVMState(ctx, "vm_1", s.to, s.reason, s.sidecar)
			if err != nil {
				t.Fatalf("SetVMState(%s): %v", s.to, err)
			}
			if vm.State != s.to || vm.Reason != s.reason || vm.SidecarID != s.want || !vm.UpdatedAt.Equal(at) || !vm.CreatedAt.Equal(t0) {
				t.Fatalf("SetVMState(%s) = %+v", s.to, vm)
			}
			if got, _ := db.GetVM(ctx, "acme", "vm_1"); got.State != s.to || got.SidecarID != s.want || !got.UpdatedAt.Equal(at) {
				t.Fatalf("GetVM after SetVMState(%s) = %+v", s.to, got)
			}
		}

		// Disposed is final: every transition is refused, with the state.
		for _, to := range []gateway.VMState{gateway.VMReady, gateway.VMLost, gateway.VMDisposed} {
			_, err := db.SetVMState(ctx, "vm_1", to, "", "")
			wantCode(t, err, gateway.CodeConflict)
			if ge := err.(*gateway.Error); ge.Details["state"] != string(gateway.VMDisposed) {
				t.Errorf("Details = %v, want state disposed", ge.Details)
			}
		}

		history, err := db.VMHistory(ctx, "acme", "vm_1")
		if err != nil {
			t.Fatalf("VMHistory: %v", err)
		}
		want := []StateChange{
			{gateway.VMCreating, "", t0},
			{gateway.VMReady, "", t0.Add(1 * time.Minute)},
			{gateway.VMReady, "reattached", t0.Add(2 * time.Minute)},
			{gateway.VMDisposing, "idle", t0.Add(3 * time.Minute)},
			{gateway.VMDisposed, "idle", t0.Add(4 * time.Minute)},
		}
		if len(history) != len(want) {
			t.Fatalf("history = %+v, want %+v", history, want)
		}
		for i := range want {
			if history[i].State != want[i].State || history[i].Reason != want[i].Reason || !history[i].At.Equal(want[i].At) {
				t.Errorf("history[%d] = %+v, want %+v", i, history[i], want[i])
			}
		}

		_, err = db.SetVMState(ctx, "vm_missing", gateway.VMReady, "", "")
		wantCode(t, err, gateway.CodeNotFound)
		_, err = db.SetVMState(ctx, "vm_1", "bogus", "", "")
		wantCode(t, err, gateway.CodeInvalidArgument)
		_, err = db.VMHistory(ctx, "acme", "vm_missing")
		wantCode(t, err, gateway.CodeNotFound)
	})
}

func TestMarkLiveVMsLostAndCount(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		mustTenant(t, db, "globex")
		vms := []struct {
			id, tenant string
			state      gateway.VMState
		}{
			{"a_creating", "acme", gateway.VMCreating},
			{"a_ready", "acme", gateway.VMReady},
			{"a_disposing", "acme", gateway.VMDisposing},
			{"a_disposed", "acme", gateway.VMDisposed},
			{"a_lost", "acme", gateway.VMLost},
			{"g_ready", "globex", gateway.VMReady},
		}
		for _, v := range vms {
			if err := db.CreateVM(ctx, gateway.VM{ID: v.id, TenantID: v.tenant, State: v.state, Reason: "before"}); err != nil {
				t.Fatal(err)
			}
		}
		for tenant, want := range map[string]int{"acme": 3, "globex": 1, "initech": 0} {
			if n, err := db.CountLiveVMs(ctx, tenant); err != nil || n != want {
				t.Errorf("CountLiveVMs(%s) = %d, %v; want %d", tenant, n, err, want)
			}
		}

		n, err := db.MarkLiveVMsLost(ctx, "gateway restarted")
		if err != nil || n != 4 {
			t.Fatalf("MarkLiveVMsLost = %d, %v; want 4", n, err)
		}
		for _, v := range vms {
			vm, err := db.GetVM(ctx, v.tenant, v.id)
			if err != nil {
				t.Fatal(err)
			}
			history, _ := db.VMHistory(ctx, v.tenant, v.id)
			if v.state.Final() {
				if vm.State != v.state || vm.Reason != "before" || len(history) != 1 {
					t.Errorf("%s (final) changed: %+v, history %+v", v.id, vm, history)
				}
				continue
			}
			if vm.State != gateway.VMLost || vm.Reason != "gateway restarted" {
				t.Errorf("%s = %+v, want lost", v.id, vm)
			}
			if len(history) != 2 || history[1].State != gateway.VMLost || history[1].Reason != "gateway restarted" {
				t.Errorf("%s history = %+v", v.id, history)
			}
		}
		for _, tenant := range []string{"acme", "globex"} {
			if n, err := db.CountLiveVMs(ctx, tenant); err != nil || n != 0 {
				t.Errorf("CountLiveVMs(%s) after = %d, %v", tenant, n, err)
			}
		}
		if n, err := db.MarkLiveVMsLost(ctx, "again"); err != nil || n != 0 {
			t.Fatalf("MarkLiveVMsLost again = %d, %v; want 0", n, err)
		}
	})
}

func TestTimestampsRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		times := []time.Time{
			time.Date(2025, 12, 31, 23, 59, 59, 999999999, time.UTC),
			time.Date(2024, 2, 29, 12, 0, 0, 1000, time.FixedZone("X", -7*3600-1800)),
			time.Date(1969, 7, 20, 20, 17, 40, 123456000, time.UTC), // before the Unix epoch
			time.Date(2200, 1, 1, 0, 0, 0, 1, time.UTC),
			time.Now(), // with a monotonic reading
		}
		for i, at := range times {
			id := fmt.Sprintf("vm_%d", i)
			if err := db.CreateVM(ctx, gateway.VM{ID: id, TenantID: "acme", CreatedAt: at, UpdatedAt: at}); err != nil {
				t.Fatal(err)
			}
			vm, err := db.GetVM(ctx, "acme", id)
			if err != nil {
				t.Fatal(err)
			}
			want := at.Truncate(time.Microsecond)
			if !vm.CreatedAt.Equal(want) || !vm.UpdatedAt.Equal(want) {
				t.Errorf("%v read back as %v / %v, want %v", at, vm.CreatedAt, vm.UpdatedAt, want)
			}
			if vm.CreatedAt.Location() != time.UTC {
				t.Errorf("%v read back in %v, want UTC", at, vm.CreatedAt.Location())
			}
			history, err := db.VMHistory(ctx, "acme", id)
			if err != nil || len(history) != 1 || !history[0].At.Equal(want) {
				t.Errorf("history of %v = %+v, %v", at, history, err)
			}
		}
		// The real clock is stored to the microsecond too.
		ten, err := db.CreateTenant(ctx, gateway.Tenant{})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := db.GetTenant(ctx, ten.ID)
		if !got.CreatedAt.Equal(ten.CreatedAt) || ten.CreatedAt.Nanosecond()%1000 != 0 {
			t.Errorf("CreateTenant returned %v, stored %v", ten.CreatedAt, got.CreatedAt)
		}
	})
}

// TestHibernationLifeCycle walks a VM through hibernate and wake as the vms
// service does, and checks what each step refuses, what counts against the
// quota of running VMs, and what a restart (MarkNodeVMsLost) keeps.
func TestHibernationLifeCycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		t0 := time.Date(2025, 2, 3, 4, 5, 6, 0, time.UTC)
		db.now = func() time.Time { return t0 }
		if err := db.CreateVM(ctx, gateway.VM{ID: "vm_1", TenantID: "acme", State: gateway.VMReady, SidecarID: "sc_1", Node: "n1",
			Spec: gateway.VMSpec{Labels: map[string]string{"app": "web"}}}); err != nil {
			t.Fatal(err)
		}
		// Only a hibernating VM takes an image, and an image is needed.
		_, _, err := db.HibernateVM(ctx, "vm_1", "blob-1", 10, "sessions-1", "request")
		wantCode(t, err, gateway.CodeConflict)
		_, err = db.SetVMState(ctx, "vm_1", gateway.VMHibernated, "request", "")
		wantCode(t, err, gateway.CodeConflict)
		if _, err := db.SetVMState(ctx, "vm_1", gateway.VMHibernating, "", ""); err != nil {
			t.Fatal(err)
		}
		_, _, err = db.HibernateVM(ctx, "vm_1", "", 10, "", "request")
		wantCode(t, err, gateway.CodeInvalidArgument)
		t1 := t0.Add(time.Minute)
		db.now = func() time.Time { return t1 }
		vm, _, err := db.HibernateVM(ctx, "vm_1", "blob-1", 10, "sessions-1", "request")
		if err != nil {
			t.Fatal(err)
		}
		if vm.State != gateway.VMHibernated || vm.Node != "n1" || vm.SidecarID != "" || vm.Image != "blob-1" || vm.ImageBytes != 10 || !vm.HibernatedAt.Equal(t1) {
			t.Fatalf("hibernated = %+v", vm)
		}
		if got, _ := db.GetVM(ctx, "acme", "vm_1"); got.State != gateway.VMHibernated || got.Image != "blob-1" || got.SessionsImage != "sessions-1" || !got.HibernatedAt.Equal(t1) {
			t.Fatalf("GetVM = %+v", got)
		}
		// A hibernated VM is listed (it has not ended), by label too, and
		// occupies no sidecar.
		page, err := db.ListVMs(ctx, gateway.VMFilter{TenantID: "acme", Labels: map[string]string{"app": "web"}})
		if err != nil || len(page.Items) != 1 {
			t.Fatalf("list = %+v, %v", page, err)
		}
		if n, err := db.CountLiveVMs(ctx, "acme"); err != nil || n != 0 {
			t.Fatalf("CountLiveVMs = %d, %v", n, err)
		}
		// Its image counts against the tenant's stored bytes.
		if used, err := db.SnapshotBytes(ctx, "acme"); err != nil || used != 10 {
			t.Fatalf("SnapshotBytes = %d, %v; want the image's 10", used, err)
		}
		// A restart of any node keeps it.
		if ids, err := db.MarkNodeVMsLost(ctx, "n1", "restart"); err != nil || len(ids) != 0 {
			t.Fatalf("MarkNodeVMsLost = %v, %v", ids, err)
		}

		// A wake within a full quota is refused; one in room claims it once.
		if err := db.CreateVM(ctx, gateway.VM{ID: "vm_2", TenantID: "acme", State: gateway.VMReady, Node: "n9"}); err != nil {
			t.Fatal(err)
		}
		_, err = db.ClaimWake(ctx, "acme", "vm_1", "n2", 1)
		wantCode(t, err, gateway.CodeResourceExhausted)
		_, err = db.ClaimWake(ctx, "globex", "vm_1", "n2", 0)
		wantCode(t, err, gateway.CodeNotFound)
		vm, err = db.ClaimWake(ctx, "acme", "vm_1", "n2", 2)
		if err != nil || vm.State != gateway.VMWaking || vm.Node != "n2" || vm.Image != "blob-1" {
			t.Fatalf("ClaimWake = %+v, %v", vm, err)
		}
		_, err = db.ClaimWake(ctx, "acme", "vm_1", "n3", 0)
		wantCode(t, err, gateway.CodeConflict)

		// The waking node died: the VM is hibernated again, with its image.
		if ids, err := db.MarkNodeVMsLost(ctx, "n2", "node died"); err != nil || len(ids) != 0 {
			t.Fatalf("MarkNodeVMsLost = %v, %v", ids, err)
		}
		if got, _ := db.GetVM(ctx, "acme", "vm_1"); got.State != gateway.VMHibernated || got.Node != "" || got.Image != "blob-1" {
			t.Fatalf("after the waking node died: %+v", got)
		}

		// A wake that completes drops the image and the hibernation time.
		if _, err := db.ClaimWake(ctx, "acme", "vm_1", "n2", 0); err != nil {
			t.Fatal(err)
		}
		vm, images, err := db.WokeVM(ctx, "vm_1", "sc_9", "request")
		if err != nil || !slices.Equal(images, []string{"blob-1", "sessions-1"}) || vm.State != gateway.VMReady || vm.SidecarID != "sc_9" ||
			vm.Image != "" || vm.SessionsImage != "" || !vm.HibernatedAt.IsZero() || vm.Node != "n2" {
			t.Fatalf("WokeVM = %+v, %q, %v", vm, images, err)
		}
		_, _, err = db.WokeVM(ctx, "vm_1", "sc_9", "request")
		wantCode(t, err, gateway.CodeConflict)

		// A hibernated VM can be deleted, and says which image to remove.
		if _, err := db.SetVMState(ctx, "vm_1", gateway.VMHibernating, "", ""); err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.HibernateVM(ctx, "vm_1", "blob-2", 20, "", "idle"); err != nil {
			t.Fatal(err)
		}
		gone, err := db.DeleteVM(ctx, "acme", "vm_1")
		if err != nil || gone.Image != "blob-2" {
			t.Fatalf("DeleteVM = %+v, %v", gone, err)
		}
		var states []gateway.VMState
		history, _ := db.VMHistory(ctx, "acme", "vm_2")
		for _, h := range history {
			states = append(states, h.State)
		}
		if len(states) != 1 {
			t.Fatalf("vm_2's history = %v", states)
		}
	})
}

// TestCheckpointLifeCycle: a running VM's checkpoint replaces the previous
// one and says which layers went; it survives the VM's loss, which makes the
// VM restorable: a wake claims it, a node dying during the restore leaves it
// lost and restorable, and a hibernation supersedes the checkpoint. The
// layers count against the tenant's stored bytes, keep the lost record past
// the ended VMs' purge, and go with the VM's deletion.
func TestCheckpointLifeCycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db *DB) {
		ctx := testContext(t)
		mustTenant(t, db, "acme")
		t0 := time.Date(2025, 2, 3, 4, 5, 6, 0, time.UTC)
		db.now = func() time.Time { return t0 }
		if err := db.CreateVM(ctx, gateway.VM{ID: "vm_1", TenantID: "acme", State: gateway.VMCreating, Node: "n1"}); err != nil {
			t.Fatal(err)
		}
		_, err := db.RecordCheckpoint(ctx, "vm_1", []gateway.Checkpoint{{Image: "base-0", Bytes: 5}}, t0)
		wantCode(t, err, gateway.CodeConflict)
		_, err = db.RecordCheckpoint(ctx, "vm_1", nil, t0)
		wantCode(t, err, gateway.CodeInvalidArgument)
		_, err = db.RecordCheckpoint(ctx, "vm_9", []gateway.Checkpoint{{Image: "base-0", Bytes: 5}}, t0)
		wantCode(t, err, gateway.CodeNotFound)
		if _, err := db.SetVMState(ctx, "vm_1", gateway.VMReady, "", "sc_1"); err != nil {
			t.Fatal(err)
		}
		base := gateway.Checkpoint{Image: "base-1", Bytes: 100}
		if dropped, err := db.RecordCheckpoint(ctx, "vm_1", []gateway.Checkpoint{base}, t0); err != nil || len(dropped) != 0 {
			t.Fatalf("RecordCheckpoint = %v, %v", dropped, err)
		}
		t1 := t0.Add(time.Minute)
		delta := gateway.Checkpoint{Image: "delta-1", Bytes: 7}
		if dropped, err := db.RecordCheckpoint(ctx, "vm_1", []gateway.Checkpoint{base, delta}, t1); err != nil || len(dropped) != 0 {
			t.Fatalf("RecordCheckpoint = %v, %v", dropped, err)
		}
		got, err := db.GetVM(ctx, "acme", "vm_1")
		if err != nil || !slices.Equal(got.Checkpoints, []gateway.Checkpoint{base, delta}) || !got.CheckpointAt.Equal(t1) || got.Restorable() {
			t.Fatalf("GetVM = %+v, %v", got, err)
		}
		if used, err := db.SnapshotBytes(ctx, "acme"); err != nil || used != 107 {
			t.Fatalf("SnapshotBytes = %d, %v; want the layers' 107", used, err)
		}

		// The sidecar dies: the VM is lost, restorable, and no purge of
		// ended records takes it.
		if _, err := db.SetVMState(ctx, "vm_1", gateway.VMLost, "the sidecar died", ""); err != nil {
			t.Fatal(err)
		}
		if got, _ := db.GetVM(ctx, "acme", "vm_1"); !got.Restorable() {
			t.Fatalf("lost VM %+v is not restorable", got)
		}
		if n, err := db.PurgeEndedVMs(ctx, t1.Add(time.Hour)); err != nil || n != 0 {
			t.Fatalf("PurgeEndedVMs = %d, %v", n, err)
		}
		// A restore claims it; the claiming node dies; it is lost again.
		vm, err := db.ClaimWake(ctx, "acme", "vm_1", "n2", 0)
		if err != nil || vm.State != gateway.VMWaking || vm.Image != "" || len(vm.Checkpoints) != 2 {
			t.Fatalf("ClaimWake = %+v, %v", vm, err)
		}
		if ids, err := db.MarkNodeVMsLost(ctx, "n2", "node died"); err != nil || !slices.Equal(ids, []string{"vm_1"}) {
			t.Fatalf("MarkNodeVMsLost = %v, %v", ids, err)
		}
		if got, _ := db.GetVM(ctx, "acme", "vm_1"); !got.Restorable() {
			t.Fatalf("after the restoring node died: %+v", got)
		}
		// The restore completes: the checkpoint stays, the next full one
		// replaces both layers.
		if _, err := db.ClaimWake(ctx, "acme", "vm_1", "n2", 0); err != nil {
			t.Fatal(err)
		}
		if _, images, err := db.WokeVM(ctx, "vm_1", "sc_2", "restore"); err != nil || len(images) != 0 {
			t.Fatalf("WokeVM = %q, %v", images, err)
		}
		full := gateway.Checkpoint{Image: "base-2", Bytes: 110}
		if dropped, err := db.RecordCheckpoint(ctx, "vm_1", []gateway.Checkpoint{full}, t1); err != nil || !slices.Equal(dropped, []string{"base-1", "delta-1"}) {
			t.Fatalf("RecordCheckpoint = %v, %v", dropped, err)
		}
		// A hibernation supersedes the checkpoint.
		if _, err := db.SetVMState(ctx, "vm_1", gateway.VMHibernating, "", ""); err != nil {
			t.Fatal(err)
		}
		vm, dropped, err := db.HibernateVM(ctx, "vm_1", "image-1", 120, "", "request")
		if err != nil || !slices.Equal(dropped, []string{"base-2"}) || len(vm.Checkpoints) != 0 || !vm.CheckpointAt.IsZero() {
			t.Fatalf("HibernateVM = %+v, %v, %v", vm, dropped, err)
		}
		if used, err := db.SnapshotBytes(ctx, "acme"); err != nil || used != 120 {
			t.Fatalf("SnapshotBytes = %d, %v; want the image's 120", used, err)
		}

		// A lost VM with a checkpoint follows the hibernated retention, and
		// its deletion names its layers.
		if err := db.CreateVM(ctx, gateway.VM{ID: "vm_2", TenantID: "acme", State: gateway.VMReady, Node: "n1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.RecordCheckpoint(ctx, "vm_2", []gateway.Checkpoint{{Image: "base-3", Bytes: 1}}, t1); err != nil {
			t.Fatal(err)
		}
		if ids, err := db.MarkNodeVMsLost(ctx, "n1", "restart"); err != nil || !slices.Equal(ids, []string{"vm_2"}) {
			t.Fatalf("MarkNodeVMsLost = %v, %v", ids, err)
		}
		old, err := db.HibernatedBefore(ctx, t1.Add(time.Hour), 10)
		if err != nil || len(old) != 2 {
			t.Fatalf("HibernatedBefore = %+v, %v; want vm_1 and vm_2", old, err)
		}
		gone, err := db.DeleteVM(ctx, "acme", "vm_2")
		if err != nil || !slices.Equal(gone.Images(), []string{"base-3"}) {
			t.Fatalf("DeleteVM = %+v, %v", gone, err)
		}
	})
}
