package cluster

import (
	"slices"
	"testing"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

func TestRank(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []gateway.Node
		want  []string
	}{
		{"fewest VMs first", []gateway.Node{{ID: "a", VMs: 3, Capacity: 64}, {ID: "b", VMs: 1, Capacity: 64}, {ID: "c", VMs: 2, Capacity: 64}}, []string{"b", "c", "a"}},
		{"share of capacity", []gateway.Node{{ID: "small", VMs: 2, Capacity: 4}, {ID: "big", VMs: 3, Capacity: 64}}, []string{"big", "small"}},
		{"then RSS", []gateway.Node{{ID: "a", VMs: 1, Capacity: 8, RSS: 900}, {ID: "b", VMs: 1, Capacity: 8, RSS: 100}}, []string{"b", "a"}},
		{"then id", []gateway.Node{{ID: "b", VMs: 1, Capacity: 8}, {ID: "a", VMs: 1, Capacity: 8}}, []string{"a", "b"}},
		{"no capacity reported", []gateway.Node{{ID: "a", VMs: 2}, {ID: "b", VMs: 1}}, []string{"b", "a"}},
	} {
		Rank(tc.nodes)
		var got []string
		for _, n := range tc.nodes {
			got = append(got, n.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
	}
}
