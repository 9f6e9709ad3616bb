package handlers

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/go-playground/validator/v10"

	gateway "github.com/agentos-gateway/agentos-gateway"
	"github.com/agentos-gateway/agentos-gateway/api"
)

var validate = newValidator()

// newValidator returns the validator of request bodies, with the gateway's
// own tags:
//   - nonul: a string without NUL bytes (the engine's strings end at the
//     first one, so "x\x00y" would silently become "x");
//   - envkey: an environment variable name: no "=" (the guest would read the
//     entry "A=B=x" as the variable A with the value "B=x") and no NUL.
func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	// Report JSON field names, not Go ones.
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name := strings.SplitN(f.Tag.Get("json"), ",", 2)[0]
		if name == "-" {
			return ""
		}
		return name
	})
	for tag, fn := range map[string]validator.Func{
		"nonul":  func(fl validator.FieldLevel) bool { return !strings.ContainsRune(fl.Field().String(), 0) },
		"envkey": func(fl validator.FieldLevel) bool { return validEnvKey(fl.Field().String()) },
	} {
		if err := v.RegisterValidation(tag, fn); err != nil {
			panic(fmt.Sprintf("handlers: register validation %s: %v", tag, err))
		}
	}
	return v
}

// validEnvKey reports whether s can be an environment variable name.
func validEnvKey(s string) bool { return s != "" && !strings.ContainsAny(s, "=\x00") }

// decodeJSON reads one JSON object into v, rejecting unknown fields, trailing
// data and bodies over the limit, then validates it.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	body := bufio.NewReader(http.MaxBytesReader(w, r.Body, limit))
	// encoding/json reads null into a struct as nothing at all; a body of
	// null would then pass as {}.
	if b, err := peekNonSpace(body); err == nil && b != '{' {
		return gateway.Errorf(gateway.CodeInvalidArgument, "the body must be a JSON object")
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, limit)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		if err != nil {
			if e := jsonError(err, limit); gateway.ErrorCode(e) == gateway.CodePayloadTooLarge {
				return e
			}
		}
		return gateway.Errorf(gateway.CodeInvalidArgument, "the body must hold a single JSON object")
	}
	return validateStruct(v)
}

// peekNonSpace returns the first byte of r after JSON white space, without
// consuming it.
func peekNonSpace(r *bufio.Reader) (byte, error) {
	for {
		b, err := r.Peek(1)
		if err != nil {
			return 0, err
		}
		switch b[0] {
		case ' ', '\t', '\n', '\r':
			_, _ = r.ReadByte()
		default:
			return b[0], nil
		}
	}
}

// requestTypes are the bodies the handlers decode. A JSON type error names
// its innermost Go struct; the field's wants are read from that struct, found
// here with every struct it holds.
var requestTypes = structsByName(requestBodies...)

// requestBodies are the request body types, one of each.
var requestBodies = []any{
	api.CreateVMRequest{}, api.UpdateVMRequest{}, api.ExecRequest{}, api.SpawnRequest{}, api.SignalRequest{}, api.OpenShellRequest{}, api.ResizeRequest{},
	api.MkdirRequest{}, api.MoveRequest{}, api.CreateTenantRequest{}, api.UpdateTenantRequest{}, api.OpenSessionRequest{},
	api.PromptRequest{}, api.AnswerPermissionRequest{}, api.SetConfigRequest{}, gateway.PermissionDefault{},
}

// embeddedStructs are the Go names of the untagged embedded structs of the
// request types.
var embeddedStructs = func() map[string]bool {
	out := map[string]bool{}
	for _, t := range requestTypes {
		for i := range t.NumField() {
			if f := t.Field(i); f.Anonymous && f.Tag.Get("json") == "" {
				out[f.Name] = true
			}
		}
	}
	return out
}()

func structsByName(vs ...any) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var add func(t reflect.Type)
	add = func(t reflect.Type) {
		t = derefType(t)
		switch t.Kind() {
		case reflect.Slice, reflect.Array, reflect.Map:
			add(t.Elem())
			return
		case reflect.Struct:
		default:
			return
		}
		if _, seen := out[t.Name()]; seen {
			return
		}
		out[t.Name()] = t
		for i := range t.NumField() {
			add(t.Field(i).Type)
		}
	}
	for _, v := range vs {
		add(reflect.TypeOf(v))
	}
	return out
}

// jsonError turns an error of encoding/json (or of the body's reader) into
// the gateway's words.
func jsonError(err error, limit int64) error {
	var (
		tooLarge *http.MaxBytesError
		syntax   *json.SyntaxError
		typ      *json.UnmarshalTypeError
		ge       *gateway.Error
	)
	switch {
	case errors.As(err, &ge):
		// The body reader's own refusal (a read timeout) stands as it is.
		return ge
	case errors.As(err, &tooLarge):
		return gateway.Errorf(gateway.CodePayloadTooLarge, "the body exceeds %d bytes", limit).WithDetail("limit", limit)
	case errors.Is(err, io.EOF):
		return gateway.Errorf(gateway.CodeInvalidArgument, "the body is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "the body is not valid JSON: it ends in the middle of a value")
	case errors.As(err, &syntax):
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "the body is not valid JSON (error at byte %d)", syntax.Offset)
	case errors.As(err, &typ):
		return typeError(typ)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return gateway.Errorf(gateway.CodeInvalidArgument, "unknown field %q", field).WithDetail("field", field)
	}
	return gateway.Wrap(gateway.CodeInvalidArgument, err, "the body is not a valid request")
}

// typeError describes a JSON value of the wrong type by what its field
// wants: the declared type of the field (an array of strings, not the string
// an item should have been), with the bounds of its validate tag.
func typeError(typ *json.UnmarshalTypeError) error {
	if typ.Field == "" {
		return gateway.Wrap(gateway.CodeInvalidArgument, typ, "the body must be a JSON object")
	}
	// encoding/json names untagged embedded structs in the path; JSON
	// flattens them.
	segs := slices.DeleteFunc(strings.Split(typ.Field, "."), func(s string) bool { return embeddedStructs[s] })
	field := strings.Join(segs, ".")
	if st, ok := requestTypes[typ.Struct]; ok {
		// The path starts at the body; the struct is the innermost one, so
		// the path's tail is the struct's own field.
		for i := range segs {
			if t, sf, ok := walkJSONPath(st, segs[i:]); ok {
				return typeMismatch(field, t, sf, typ.Value, typ)
			}
		}
	}
	return typeMismatch(field, typ.Type, reflect.StructField{}, typ.Value, typ)
}

// walkJSONPath follows a JSON path from a struct type to the type it ends
// at and the last struct field on the way.
func walkJSONPath(t reflect.Type, segs []string) (reflect.Type, reflect.StructField, bool) {
	var sf reflect.StructField
	for _, seg := range segs {
		t = derefType(t)
		for t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			t = derefType(t.Elem())
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := fieldByJSONName(t, seg)
			if !ok {
				return nil, sf, false
			}
			t, sf = f.Type, f
		case reflect.Map:
			// The segment is a key: what is wanted is the map's element.
			t = t.Elem()
		default:
			return nil, sf, false
		}
	}
	return t, sf, true
}

func typeMismatch(field string, want reflect.Type, sf reflect.StructField, got string, cause error) error {
	if field == "" {
		return gateway.Wrap(gateway.CodeInvalidArgument, cause, "the body must be a JSON object")
	}
	return gateway.Wrap(gateway.CodeInvalidArgument, cause, "field %q must be %s", field, describeType(want, sf, got)).WithDetail("field", field)
}

// describeType names a Go type by the JSON it accepts: "a string", "an
// array of strings", "an integer from 1 to 1000" (bounds from sf's validate
// tag, else the type's own).
func describeType(t reflect.Type, sf reflect.StructField, got string) string {
	if t == reflect.TypeFor[json.RawMessage]() {
		return "valid JSON"
	}
	t = derefType(t)
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		lo, hi := bounds(sf.Tag.Get("validate"), t)
		return "an integer" + rangeWords(lo, hi)
	case reflect.Float32, reflect.Float64:
		lo, hi := bounds(sf.Tag.Get("validate"), t)
		return "a number" + rangeWords(lo, hi)
	case reflect.Slice, reflect.Array:
		elem := derefType(t.Elem())
		if isInteger(elem) {
			lo, hi := bounds(afterDive(sf.Tag.Get("validate")), elem)
			return "an array of integers" + rangeWords(lo, hi)
		}
		return "an array of " + plural(elem)
	case reflect.Map:
		if t.Elem().Kind() == reflect.Interface {
			return "an object"
		}
		return "an object whose values are " + plural(derefType(t.Elem()))
	case reflect.Struct:
		return "an object"
	}
	return "a different JSON value, not " + got
}

func plural(t reflect.Type) string {
	switch {
	case t.Kind() == reflect.String:
		return "strings"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case isInteger(t):
		return "integers"
	case t.Kind() == reflect.Float32, t.Kind() == reflect.Float64:
		return "numbers"
	case t.Kind() == reflect.Slice, t.Kind() == reflect.Array:
		return "arrays"
	}
	return "objects"
}

func isInteger(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// bounds reads the lower and upper bounds of a number from the first
// segment of a validate tag (up to "dive"), falling back to the range of
// the integer type t; "" is no bound.
func bounds(tag string, t reflect.Type) (lo, hi string) {
	tag, _, _ = strings.Cut(tag, ",dive")
	for _, part := range strings.Split(tag, ",") {
		name, param, _ := strings.Cut(part, "=")
		switch name {
		case "min", "gte":
			lo = param
		case "max", "lte":
			hi = param
		}
	}
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if lo == "" {
			lo = "0"
		}
		if hi == "" && t.Bits() < 64 {
			hi = strconv.FormatUint(1<<t.Bits()-1, 10)
		}
	case reflect.Int8, reflect.Int16, reflect.Int32:
		if lo == "" {
			lo = strconv.FormatInt(-1<<(t.Bits()-1), 10)
		}
		if hi == "" {
			hi = strconv.FormatInt(1<<(t.Bits()-1)-1, 10)
		}
	case reflect.Int, reflect.Int64:
		if hi == "" && lo != "" {
			hi = strconv.FormatInt(math.MaxInt64, 10)
		}
	}
	return lo, hi
}

// afterDive returns the part of a validate tag that applies to a slice's
// elements.
func afterDive(tag string) string {
	_, rest, _ := strings.Cut(tag, "dive,")
	return rest
}

func rangeWords(lo, hi string) string {
	switch {
	case lo != "" && hi != "":
		return " from " + lo + " to " + hi
	case lo != "":
		return " of at least " + lo
	case hi != "":
		return " of at most " + hi
	}
	return ""
}

func derefType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// fieldByJSONName finds the field of a struct that JSON names name,
// looking into untagged embedded structs as encoding/json does.
func fieldByJSONName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := strings.SplitN(f.Tag.Get("json"), ",", 2)[0]
		if f.Anonymous && tag == "" && derefType(f.Type).Kind() == reflect.Struct {
			if sf, ok := fieldByJSONName(derefType(f.Type), name); ok {
				return sf, true
			}
			continue
		}
		if tag == name || (tag == "" && strings.EqualFold(f.Name, name)) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// validateStruct validates v by its tags and reports the first failure in
// the gateway's words, with the JSON path of the field in details.field:
// "argv[2]" for an item of an array, "env.A=B" for an entry of an object.
func validateStruct(v any) error {
	err := validate.Struct(v)
	if err == nil {
		return nil
	}
	var verrs validator.ValidationErrors
	if !errors.As(err, &verrs) || len(verrs) == 0 {
		return gateway.Wrap(gateway.CodeInvalidArgument, err, "the request is not valid")
	}
	fe := verrs[0]
	loc := locate(reflect.TypeOf(v), fe.StructNamespace())
	return gateway.Wrap(gateway.CodeInvalidArgument, err, "%s", failureMessage(fe, loc)).WithDetail("field", loc.path)
}

// location is where a validation failed, as JSON sees it.
type location struct {
	path   string              // JSON path: "cwd", "quotas.maxVms", "argv[2]", "env.A"
	name   string              // the field's JSON name: "argv", "env"
	field  reflect.StructField // the Go field
	parent reflect.Type        // the struct holding it
	// For a failure inside an array or object: the index or key, and
	// whether the field is an object (map).
	index string
	inner bool
	isMap bool
}

// locate resolves a validator struct namespace ("ExecRequest.Invocation.
// Argv[2]") against the type it was validated from.
func locate(root reflect.Type, ns string) location {
	var loc location
	// Segments are split on "." up to the first "[": what follows is an
	// index or a map key, which may hold anything (dots included).
	head, idx, bracket := strings.Cut(ns, "[")
	segs := strings.Split(head, ".")[1:]
	if bracket {
		loc.inner = true
		loc.index = strings.TrimSuffix(idx, "]")
	}
	t := derefType(root)
	var path []string
	for _, seg := range segs {
		if t.Kind() != reflect.Struct {
			break
		}
		f, ok := t.FieldByName(seg)
		if !ok {
			path = append(path, seg)
			break
		}
		loc.parent, loc.field = t, f
		t = derefType(f.Type)
		if f.Anonymous && f.Tag.Get("json") == "" {
			continue // JSON flattens untagged embedded structs
		}
		loc.name = jsonName(f)
		path = append(path, loc.name)
	}
	loc.path = strings.Join(path, ".")
	if loc.inner {
		loc.isMap = t.Kind() == reflect.Map
		if loc.isMap {
			loc.path += "." + loc.index
		} else {
			loc.path += "[" + loc.index + "]"
		}
	}
	return loc
}

func jsonName(f reflect.StructField) string {
	if name := strings.SplitN(f.Tag.Get("json"), ",", 2)[0]; name != "" && name != "-" {
		return name
	}
	return f.Name
}

// jsonNameOf returns the JSON name of the Go field goName of t (for the
// params of required_without and friends, which name Go fields).
func jsonNameOf(t reflect.Type, goName string) string {
	if t != nil {
		if f, ok := derefType(t).FieldByName(goName); ok {
			return jsonName(f)
		}
	}
	return strings.ToLower(goName[:1]) + goName[1:]
}

// failureMessage says in plain words what a validation failure means.
func failureMessage(fe validator.FieldError, loc location) string {
	subject := fmt.Sprintf("field %q", loc.path)
	if loc.inner && loc.isMap {
		// A key and its value fail at the same path; the value validated is
		// the key itself when the key failed.
		if s, ok := fe.Value().(string); ok && s == loc.index {
			subject = fmt.Sprintf("%s key %q", loc.name, loc.index)
		} else {
			subject = fmt.Sprintf("the value of %s key %q", loc.name, loc.index)
		}
	}
	kind := fe.Kind()
	param := fe.Param()
	switch fe.Tag() {
	case "required":
		if isNumber(kind) {
			// A number is required by being non-zero: 0 is as wrong as
			// nothing.
			return numberMessage(subject, kind, loc)
		}
		return subject + " is required"
	case "required_without":
		return fmt.Sprintf("either %q or %q is required", loc.name, jsonNameOf(loc.parent, param))
	case "excluded_with":
		return fmt.Sprintf("%q and %q cannot be given together", loc.name, jsonNameOf(loc.parent, param))
	case "oneof":
		return fmt.Sprintf("%s must be one of: %s", subject, strings.Join(strings.Fields(param), ", "))
	case "startswith":
		if param == "/" {
			return subject + " must be an absolute path"
		}
		return fmt.Sprintf("%s must start with %q", subject, param)
	case "nonul", "excludes":
		return subject + " must not contain NUL bytes"
	case "envkey":
		return subject + ` is not a valid environment variable name: it must not be empty or contain "=" or NUL bytes`
	case "min", "max", "gte", "lte":
		return sizeMessage(subject, fe.Tag(), param, kind, loc)
	}
	return subject + " is not valid"
}

// sizeMessage words a bound on a length (strings, arrays, objects) or on a
// number.
func sizeMessage(subject, tag, param string, kind reflect.Kind, loc location) string {
	n, _ := strconv.Atoi(param)
	atLeast := tag == "min" || tag == "gte"
	unit := func(one, many string) string {
		if n == 1 {
			return one
		}
		return many
	}
	switch kind {
	case reflect.String:
		if atLeast && n == 1 {
			return subject + " must not be empty"
		}
		what := unit("character", "characters")
		if atLeast {
			return fmt.Sprintf("%s must be at least %d %s long", subject, n, what)
		}
		return fmt.Sprintf("%s must be at most %d %s long", subject, n, what)
	case reflect.Slice, reflect.Array:
		if atLeast {
			return fmt.Sprintf("%s must have at least %d %s", subject, n, unit("item", "items"))
		}
		return fmt.Sprintf("%s may have at most %d %s", subject, n, unit("item", "items"))
	case reflect.Map:
		if atLeast {
			return fmt.Sprintf("%s must have at least %d %s", subject, n, unit("entry", "entries"))
		}
		return fmt.Sprintf("%s may have at most %d %s", subject, n, unit("entry", "entries"))
	}
	if loc.field.Type == nil {
		if atLeast {
			return fmt.Sprintf("%s must be at least %s", subject, param)
		}
		return fmt.Sprintf("%s must be at most %s", subject, param)
	}
	return numberMessage(subject, kind, loc)
}

func isNumber(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// numberMessage words the range of a number field from its validate tag.
func numberMessage(subject string, kind reflect.Kind, loc location) string {
	if loc.field.Type == nil {
		return subject + " is out of range"
	}
	t := derefType(loc.field.Type)
	tag2 := loc.field.Tag.Get("validate")
	if loc.inner {
		t = derefType(t.Elem())
		tag2 = afterDive(tag2)
	}
	lo, hi := bounds(tag2, t)
	if kind == reflect.Float32 || kind == reflect.Float64 {
		return subject + " must be a number" + rangeWords(lo, hi)
	}
	return subject + " must be an integer" + rangeWords(lo, hi)
}
