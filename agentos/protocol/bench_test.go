package protocol

import (
	"testing"
)

// benchFrames returns representative golden payloads: a small process
// output event (the most frequent sidecar→host frame) and the largest
// request the SDK sends during VM setup.
func benchFrames(b *testing.B) []struct {
	name    string
	payload []byte
} {
	var out []struct {
		name    string
		payload []byte
	}
	seen := map[string]bool{}
	for _, gf := range loadGolden(b) {
		for _, rec := range gf.records {
			if rec.HexTruncated {
				continue
			}
			f, err := UnmarshalFrame(rec.payload)
			if err != nil {
				b.Fatal(err)
			}
			var name string
			switch f := f.(type) {
			case EventFrame:
				if _, ok := f.Payload.(ProcessOutputEvent); ok {
					name = "ProcessOutputEvent"
				}
			case RequestFrame:
				if _, ok := f.Payload.(ConfigureVMRequest); ok {
					name = "ConfigureVmRequest"
				}
			}
			if name != "" && !seen[name] {
				seen[name] = true
				out = append(out, struct {
					name    string
					payload []byte
				}{name, rec.payload})
			}
		}
	}
	if len(out) != 2 {
		b.Fatalf("found %d of 2 benchmark frames", len(out))
	}
	return out
}

func BenchmarkUnmarshalFrame(b *testing.B) {
	for _, bf := range benchFrames(b) {
		b.Run(bf.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bf.payload)))
			for b.Loop() {
				if _, err := UnmarshalFrame(bf.payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMarshalFrame(b *testing.B) {
	for _, bf := range benchFrames(b) {
		f, err := UnmarshalFrame(bf.payload)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bf.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bf.payload)))
			for b.Loop() {
				if _, err := MarshalFrame(f); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bf.name+"/AppendFrame", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bf.payload)))
			var buf []byte
			for b.Loop() {
				if buf, err = AppendFrame(buf[:0], f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
