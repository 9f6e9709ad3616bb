//go:build race

package main

// raceEnabled: the race detector's shadow memory multiplies the process's
// resident set, so memory bounds are only asserted without it.
const raceEnabled = true
