package protocol

//go:generate go run ./internal/baregen -schema schema.bare -out zz_generated.go
