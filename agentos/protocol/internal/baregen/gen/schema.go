// Package gen parses the subset of the BARE schema language used by the
// agentOS sidecar protocol and generates Go types and codecs from it.
//
// Supported: `type X struct {…}`, `type X union {A = 0 | B = 1}`,
// `type X enum {A = 0 …}`, `type X void`, aliases (`type X str`), the
// primitives str, data, bool, u8…u64 and i8…i64, optional<T>, list<T>,
// map<K><V>, explicit `= N` ordinals and `#` comments. Fixed-length
// list/data, uint/int and floats are rejected because the protocol does not
// use them.
package gen

import (
	"fmt"
	"strconv"
	"strings"
)

// Schema is a parsed schema: its named types in declaration order.
type Schema struct {
	Types  []*TypeDef
	byName map[string]*TypeDef
}

// Lookup returns the type named name, or nil.
func (s *Schema) Lookup(name string) *TypeDef { return s.byName[name] }

// DefKind says what a named type definition is.
type DefKind int

// Kinds of named type definitions.
const (
	DefAlias DefKind = iota // type X <type expression>
	DefStruct
	DefUnion
	DefEnum
	DefVoid
)

// TypeDef is one `type Name …` declaration.
type TypeDef struct {
	Name    string
	Kind    DefKind
	Line    int
	Alias   *Type       // DefAlias
	Fields  []Field     // DefStruct
	Members []Member    // DefUnion, in declaration order
	Values  []EnumValue // DefEnum, in declaration order
}

// Field is a struct field.
type Field struct {
	Name string
	Type *Type
}

// Member is a union member: a named type and its tag.
type Member struct {
	Type string
	Tag  uint64
}

// EnumValue is one enum value and its ordinal.
type EnumValue struct {
	Name  string
	Value uint64
}

// TypeKind classifies a type expression.
type TypeKind int

// Kinds of type expressions.
const (
	Prim     TypeKind = iota // str, data, bool, u8…u64, i8…i64
	Named                    // reference to a TypeDef
	Optional                 // optional<Elem>
	List                     // list<Elem>
	MapType                  // map<Key><Elem>
)

// Type is a type expression such as `optional<list<str>>`.
type Type struct {
	Kind TypeKind
	Name string // Prim, Named
	Key  *Type  // MapType
	Elem *Type  // Optional, List, MapType (the value)
}

// primSize is the encoded size of fixed-width primitives and the minimum
// size (one length byte) of str and data.
var primSize = map[string]int{
	"bool": 1, "u8": 1, "i8": 1, "u16": 2, "i16": 2,
	"u32": 4, "i32": 4, "u64": 8, "i64": 8, "str": 1, "data": 1,
}

type token struct {
	text string
	line int
}

// parseError is raised with panic inside the parser and turned into the
// returned error by Parse; it keeps the recursive-descent code linear.
type parseError struct{ err error }

type parser struct {
	toks []token
	pos  int
}

// Parse parses and validates a schema.
func Parse(src []byte) (s *Schema, err error) {
	defer func() {
		if e := recover(); e != nil {
			pe, ok := e.(parseError)
			if !ok {
				panic(e)
			}
			err = pe.err
		}
	}()
	p := &parser{toks: lex(string(src))}
	s = &Schema{byName: map[string]*TypeDef{}}
	for p.pos < len(p.toks) {
		p.expect("type")
		line := p.toks[p.pos].line
		name := p.ident()
		if s.byName[name] != nil {
			p.failf(line, "type %s redeclared", name)
		}
		d := p.typeDef(name)
		d.Line = line
		s.Types = append(s.Types, d)
		s.byName[name] = d
	}
	s.check()
	return s, nil
}

func lex(src string) []token {
	var toks []token
	line := 1
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case isWordByte(c):
			j := i
			for j < len(src) && isWordByte(src[j]) {
				j++
			}
			toks = append(toks, token{src[i:j], line})
			i = j
		case strings.IndexByte("{}<>|:=[]", c) >= 0:
			toks = append(toks, token{src[i : i+1], line})
			i++
		default:
			panic(parseError{fmt.Errorf("line %d: unexpected character %q", line, c)})
		}
	}
	return toks
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func (p *parser) failf(line int, format string, args ...any) {
	panic(parseError{fmt.Errorf("line %d: %s", line, fmt.Sprintf(format, args...))})
}

func (p *parser) line() int {
	if p.pos < len(p.toks) {
		return p.toks[p.pos].line
	}
	if len(p.toks) > 0 {
		return p.toks[len(p.toks)-1].line
	}
	return 1
}

func (p *parser) peek() string {
	if p.pos < len(p.toks) {
		return p.toks[p.pos].text
	}
	return ""
}

func (p *parser) next() string {
	if p.pos >= len(p.toks) {
		p.failf(p.line(), "unexpected end of schema")
	}
	p.pos++
	return p.toks[p.pos-1].text
}

func (p *parser) expect(want string) {
	if got := p.next(); got != want {
		p.failf(p.toks[p.pos-1].line, "expected %q, found %q", want, got)
	}
}

func (p *parser) ident() string {
	t := p.next()
	if !isWordByte(t[0]) || t[0] >= '0' && t[0] <= '9' {
		p.failf(p.toks[p.pos-1].line, "expected an identifier, found %q", t)
	}
	return t
}

// ordinal parses the `N` of an explicit `= N`.
func (p *parser) ordinal() uint64 {
	t := p.next()
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		p.failf(p.toks[p.pos-1].line, "bad ordinal %q", t)
	}
	return n
}

func (p *parser) typeDef(name string) *TypeDef {
	d := &TypeDef{Name: name}
	switch p.peek() {
	case "struct":
		d.Kind = DefStruct
		p.next()
		p.expect("{")
		for p.peek() != "}" {
			f := Field{Name: p.ident()}
			p.expect(":")
			f.Type = p.typeExpr()
			d.Fields = append(d.Fields, f)
		}
		p.next()
	case "union":
		d.Kind = DefUnion
		p.next()
		p.expect("{")
		if p.peek() == "|" {
			p.next()
		}
		var tag uint64
		for p.peek() != "}" {
			m := Member{Type: p.ident(), Tag: tag}
			if p.peek() == "=" {
				p.next()
				m.Tag = p.ordinal()
			}
			d.Members = append(d.Members, m)
			tag = m.Tag + 1
			if p.peek() != "|" {
				break
			}
			p.next()
		}
		p.expect("}")
	case "enum":
		d.Kind = DefEnum
		p.next()
		p.expect("{")
		var val uint64
		for p.peek() != "}" {
			v := EnumValue{Name: p.ident(), Value: val}
			if p.peek() == "=" {
				p.next()
				v.Value = p.ordinal()
			}
			d.Values = append(d.Values, v)
			val = v.Value + 1
		}
		p.next()
	case "void":
		d.Kind = DefVoid
		p.next()
	default:
		d.Kind = DefAlias
		d.Alias = p.typeExpr()
	}
	return d
}

func (p *parser) typeExpr() *Type {
	line := p.line()
	t := p.ident()
	switch t {
	case "optional", "list":
		p.expect("<")
		elem := p.typeExpr()
		p.expect(">")
		if p.peek() == "[" {
			p.failf(line, "fixed-length lists are not supported")
		}
		if t == "optional" {
			return &Type{Kind: Optional, Elem: elem}
		}
		return &Type{Kind: List, Elem: elem}
	case "map":
		p.expect("<")
		key := p.typeExpr()
		p.expect(">")
		p.expect("<")
		val := p.typeExpr()
		p.expect(">")
		return &Type{Kind: MapType, Key: key, Elem: val}
	case "data":
		if p.peek() == "[" {
			p.failf(line, "fixed-length data is not supported")
		}
	case "uint", "int", "f32", "f64":
		p.failf(line, "type %s is not supported", t)
	case "struct", "union", "enum", "void":
		p.failf(line, "%s is only allowed as the whole body of a type declaration", t)
	}
	if _, ok := primSize[t]; ok {
		return &Type{Kind: Prim, Name: t}
	}
	return &Type{Kind: Named, Name: t}
}

// check validates references and the constraints the generator relies on.
func (s *Schema) check() {
	fail := func(d *TypeDef, format string, args ...any) {
		panic(parseError{fmt.Errorf("line %d: type %s: %s", d.Line, d.Name, fmt.Sprintf(format, args...))})
	}
	var walk func(d *TypeDef, t *Type)
	walk = func(d *TypeDef, t *Type) {
		switch t.Kind {
		case Named:
			ref := s.byName[t.Name]
			if ref == nil {
				fail(d, "undefined type %s", t.Name)
			}
			if ref.Kind == DefVoid {
				fail(d, "void type %s may only be used as a union member", t.Name)
			}
		case Optional, List:
			walk(d, t.Elem)
		case MapType:
			if k := s.Resolve(t.Key); k.Kind != Prim || k.Name == "data" {
				fail(d, "map keys must be primitive (not data)")
			}
			walk(d, t.Key)
			walk(d, t.Elem)
		}
	}
	for _, d := range s.Types {
		switch d.Kind {
		case DefAlias:
			walk(d, d.Alias)
			if r := s.Resolve(d.Alias); r.Kind == Named && s.byName[r.Name].Kind == DefAlias {
				fail(d, "alias cycle")
			}
		case DefStruct:
			if len(d.Fields) == 0 {
				fail(d, "struct has no fields (use void)")
			}
			seen := map[string]bool{}
			for _, f := range d.Fields {
				if seen[f.Name] {
					fail(d, "duplicate field %s", f.Name)
				}
				seen[f.Name] = true
				walk(d, f.Type)
			}
		case DefUnion:
			if len(d.Members) == 0 {
				fail(d, "union has no members")
			}
			tags := map[uint64]bool{}
			names := map[string]bool{}
			for _, m := range d.Members {
				ref := s.byName[m.Type]
				if ref == nil {
					fail(d, "undefined member type %s", m.Type)
				}
				if ref.Kind != DefStruct && ref.Kind != DefVoid && ref.Kind != DefEnum {
					fail(d, "member %s must be a struct, enum or void type", m.Type)
				}
				if tags[m.Tag] || names[m.Type] {
					fail(d, "duplicate member %s = %d", m.Type, m.Tag)
				}
				tags[m.Tag], names[m.Type] = true, true
			}
		case DefEnum:
			if len(d.Values) == 0 {
				fail(d, "enum has no values")
			}
			vals := map[uint64]bool{}
			names := map[string]bool{}
			for _, v := range d.Values {
				if vals[v.Value] || names[v.Name] {
					fail(d, "duplicate value %s = %d", v.Name, v.Value)
				}
				if v.Value > 1<<32-1 {
					fail(d, "value %s = %d does not fit in uint32", v.Name, v.Value)
				}
				vals[v.Value], names[v.Name] = true, true
			}
		}
	}
}

// Resolve follows aliases until it reaches a primitive, a composite type
// expression or a non-alias named type.
func (s *Schema) Resolve(t *Type) *Type {
	for i := 0; t.Kind == Named && i <= len(s.Types); i++ {
		d := s.byName[t.Name]
		if d == nil || d.Kind != DefAlias {
			return t
		}
		t = d.Alias
	}
	return t
}

// MinSize returns the fewest bytes any value of t encodes to. Decoders use it
// to reject list and map counts that cannot fit in the remaining input
// before allocating anything.
func (s *Schema) MinSize(t *Type) int {
	t = s.Resolve(t)
	switch t.Kind {
	case Prim:
		return primSize[t.Name]
	case Optional, List, MapType:
		return 1
	}
	d := s.byName[t.Name]
	switch d.Kind {
	case DefStruct:
		n := 0
		for _, f := range d.Fields {
			n += s.MinSize(f.Type)
		}
		return n
	case DefUnion:
		least := -1
		for _, m := range d.Members {
			if n := s.MinSize(&Type{Kind: Named, Name: m.Type}); least < 0 || n < least {
				least = n
			}
		}
		return 1 + least
	case DefEnum:
		return 1
	}
	return 0 // void
}
