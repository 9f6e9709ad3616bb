package vmspec

import (
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	gateway "github.com/agentos-gateway/agentos-gateway"
)

// MaxLimit is the largest value of a VM limit: the largest integer a JSON
// number holds exactly (the engine refuses some limits above it).
const MaxLimit = 1<<53 - 1

// LimitKeys are the VM limits the pinned engine (agentos-sidecar 0.2.21)
// accepts, by section, each with its smallest value: the engine refuses 0
// for most of them. Every value is an integer up to MaxLimit. The table was
// read from the engine's own answers to unknown and zero values, and
// api/openapi.yaml documents the same keys (a test keeps them equal).
var LimitKeys = map[string]map[string]uint64{
	"reactor": {
		"maxCapabilities": 1, "maxReadyHandles": 1, "maxTasks": 1, "workQuantum": 1, "byteQuantum": 1, "maxHandleCommands": 1, "maxHandleCommandBytes": 1, "maxBridgeCalls": 1, "maxBridgeRequestBytes": 1, "maxBridgeResponseBytes": 1, "maxAsyncCompletions": 1, "maxAsyncCompletionBytes": 1, "maxBlockingJobs": 1, "maxBlockingBytes": 1, "perHandleOperationQuantum": 1, "acceptQuantum": 1, "datagramQuantum": 1, "completionQuantum": 1, "signalQuantum": 1, "shutdownDeadlineMs": 1, "operationDeadlineMs": 1,
	},
	"resources": {
		"cpuCount": 0, "maxProcesses": 0, "maxOpenFds": 0, "maxPipes": 0, "maxPtys": 0, "maxSockets": 0, "maxConnections": 1, "maxSocketBufferedBytes": 1, "maxSocketDatagramQueueLen": 1, "maxFilesystemBytes": 1, "maxInodeCount": 1, "maxBlockingReadMs": 0, "maxPreadBytes": 0, "maxFdWriteBytes": 0, "maxProcessArgvBytes": 0, "maxProcessEnvBytes": 0, "maxReaddirEntries": 0, "maxRecursiveFsDepth": 0, "maxRecursiveFsEntries": 0, "maxWasmFuel": 0, "maxWasmMemoryBytes": 0, "maxWasmStackBytes": 0,
	},
	"http": {
		"maxFetchResponseBytes": 1,
	},
	"udp": {
		"maxBufferedDatagrams": 1, "maxBufferedBytes": 1,
	},
	"tls": {
		"maxBufferedBytes": 1,
	},
	"http2": {
		"maxConnections": 1, "maxStreams": 1, "maxStreamsPerConnection": 1, "maxBufferedBytes": 1, "maxHeaderBytes": 1, "maxDataBytes": 1, "maxPendingCommands": 1, "maxPendingCommandBytes": 1, "maxPendingEvents": 1, "maxPendingEventBytes": 1,
	},
	"hostFunctions": {
		"defaultTimeoutMs": 0, "maxTimeoutMs": 1, "maxRegisteredCollections": 1, "maxRegisteredFunctionsPerVm": 1, "maxFunctionsPerCollection": 1, "maxSchemaBytes": 1, "maxExamplesPerFunction": 0, "maxExampleInputBytes": 1,
	},
	"plugins": {
		"maxPersistedManifestBytes": 1, "maxPersistedManifestFileBytes": 0,
	},
	"acp": {
		"maxReadLineBytes": 1, "stdoutBufferByteLimit": 1, "maxCompletedMessageBytes": 1, "maxTurnOutputBytes": 1, "maxPromptBytes": 1, "maxPromptBlocks": 1, "maxFallbackContinuationBytes": 1, "maxSessionHistoryBytes": 1, "maxSessionHistoryEvents": 1, "maxHistoryPageEntries": 1, "maxSessionListEntries": 1, "maxSessionsPerVm": 1, "maxPromptsPerSession": 1, "maxPromptsPerVm": 1, "maxPendingPermissionsPerSession": 1, "maxPendingPermissionsPerVm": 1, "maxPermissionOutcomesPerSession": 1, "maxPermissionOutcomesPerVm": 1,
	},
	"sqlite": {
		"maxResultBytes": 1,
	},
	"jsRuntime": {
		"v8HeapLimitMb": 1, "syncRpcWaitTimeoutMs": 0, "cpuTimeLimitMs": 0, "wallClockLimitMs": 0, "importCacheMaterializeTimeoutMs": 1, "capturedOutputLimitBytes": 1, "stdinBufferLimitBytes": 1, "eventPayloadLimitBytes": 1, "maxTimers": 1, "v8IpcMaxFrameBytes": 1,
	},
	"python": {
		"outputBufferMaxBytes": 1, "executionTimeoutMs": 1, "maxOldSpaceMb": 0, "vfsRpcTimeoutMs": 1,
	},
	"wasm": {
		"maxModuleFileBytes": 1, "capturedOutputLimitBytes": 1, "syncReadLimitBytes": 1, "prewarmTimeoutMs": 1, "runnerHeapLimitMb": 1, "runnerCpuTimeLimitMs": 0,
	},
	"execution": {
		"completedTtlMs": 1, "maxCompletedExecutions": 1, "liveExecutionWarningThreshold": 1,
	},
	"process": {
		"maxSpawnFileActions": 1, "maxSpawnFileActionBytes": 1, "pendingStdinBytes": 1, "pendingEventCount": 1, "pendingEventBytes": 1,
	},
}

// CheckLimits refuses limits the engine would refuse by their shape:
// unknown sections or keys, values that are not integers in range. What
// only the engine checks (some limits must not exceed others) is refused by
// it, and reported by vms' createError (RefusedLimits names them).
func CheckLimits(limits map[string]any) error {
	for _, section := range slices.Sorted(maps.Keys(limits)) {
		keys, ok := LimitKeys[section]
		if !ok {
			return gateway.Errorf(gateway.CodeInvalidArgument, "unknown limits section %q; the sections are %s", section, strings.Join(slices.Sorted(maps.Keys(LimitKeys)), ", ")).
				WithDetail("field", "limits."+section)
		}
		obj, ok := limits[section].(map[string]any)
		if !ok {
			return gateway.Errorf(gateway.CodeInvalidArgument, "limits.%s must be an object", section).WithDetail("field", "limits."+section)
		}
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			field := "limits." + section + "." + key
			lo, ok := keys[key]
			if !ok {
				return gateway.Errorf(gateway.CodeInvalidArgument, "unknown limit %q; the limits of %s are %s", field, section, strings.Join(slices.Sorted(maps.Keys(keys)), ", ")).
					WithDetail("field", field)
			}
			n, ok := obj[key].(float64)
			if !ok || n != math.Trunc(n) || n < float64(lo) || n > MaxLimit {
				return gateway.Errorf(gateway.CodeInvalidArgument, "%s must be an integer from %d to %d", field, lo, uint64(MaxLimit)).WithDetail("field", field)
			}
		}
	}
	return nil
}

// limitName matches the limits an engine refusal names, in either of the
// engine's spellings (camelCase or snake_case).
var limitName = regexp.MustCompile(`limits\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+`)

// RefusedLimits returns the documented names of the limits an engine
// refusal names, so the caller learns which ones without the engine's words.
func RefusedLimits(msg string) []string {
	var out []string
	for _, m := range limitName.FindAllString(msg, -1) {
		parts := strings.SplitN(m, ".", 3)
		name := "limits." + camel(parts[1]) + "." + camel(parts[2])
		if _, ok := LimitKeys[camel(parts[1])][camel(parts[2])]; ok && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

func camel(s string) string {
	parts := strings.Split(s, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return strings.Join(parts, "")
}
