"""GraphQL requests as GitHub's GraphQL API reads them, against a schema the caller names.

This parses an operation document (the GraphQL grammar without fragments and directives),
validates it against a `Schema` (the few types the sandbox serves), coerces its arguments
with the request's variables, and selects the fields asked for from a result. Whatever the
schema lacks is refused as GitHub refuses a field that does not exist on its schema: a
`GraphQLError`, which answers HTTP 200 with an `errors` array and no `data`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeAlias

Json = dict[str, Any]

_TOKEN = re.compile(
    r"(?P<ignored>[\s,\ufeff]+|#[^\n\r]*)"
    r'|(?P<block>"""(?:\\"""|(?!""")[\s\S])*""")'
    r'|(?P<string>"(?:\\.|[^"\\\n\r])*")'
    r"|(?P<number>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<name>[_A-Za-z][_0-9A-Za-z]*)"
    r"|(?P<punct>\.\.\.|[!$&():=@\[\]{|}])"
)
# graphql-ruby's names for tokens, which GitHub's parse errors quote.
_PUNCTUATION = {
    "{": "LCURLY",
    "}": "RCURLY",
    "(": "LPAREN",
    ")": "RPAREN",
    "[": "LBRACKET",
    "]": "RBRACKET",
    ":": "COLON",
    "!": "BANG",
    "$": "VAR_SIGN",
    "=": "EQUALS",
    "@": "DIR_SIGN",
    "...": "ELLIPSIS",
    "|": "PIPE",
    "&": "AMP",
}
ROOTS = {"query": "Query", "mutation": "Mutation", "subscription": "Subscription"}
SCALARS = {"ID": (str, int), "String": (str,), "Int": (int,), "Boolean": (bool,)}


class GraphQLError(Exception):
    """A request GitHub's GraphQL API would not run: it answers `errors` alone."""

    def __init__(self, *errors: Json) -> None:
        super().__init__(errors[0]["message"])
        self.errors = list(errors)


@dataclass(frozen=True)
class Variable:
    """A `$name` in a document."""

    name: str


@dataclass(frozen=True)
class EnumValue:
    """A bare name used as a value."""

    name: str


Value: TypeAlias = (
    "Variable | EnumValue | str | int | float | bool | list[Value] | dict[str, Value] | None"
)


@dataclass(frozen=True)
class Location:
    """Where a token starts (1-based), as GitHub's errors give it."""

    line: int
    column: int

    def json(self) -> Json:
        """Render the location as an `errors[].locations` entry."""
        return {"line": self.line, "column": self.column}


@dataclass(frozen=True)
class Token:
    """One lexical token of a document."""

    kind: str
    text: str
    at: Location


@dataclass
class Field:
    """One field of a selection set."""

    name: str
    alias: str | None
    arguments: dict[str, Value]
    selections: list[Field]
    at: Location

    @property
    def key(self) -> str:
        """Return the response key: the alias, or the field's name."""
        return self.alias or self.name


@dataclass(frozen=True)
class VariableDefinition:
    """A declared variable: its type as written (`ID!`) and its default."""

    type: str
    default: Value


@dataclass
class Operation:
    """One operation of a document."""

    kind: str
    name: str | None
    variables: dict[str, VariableDefinition]
    selections: list[Field]

    @property
    def path_name(self) -> str:
        """Return how GitHub's error paths begin for this operation: `mutation`, `query Name`."""
        return f"{self.kind} {self.name}" if self.name else self.kind


@dataclass(frozen=True)
class FieldType:
    """A field of the schema: the type it returns and the arguments it takes (name: type)."""

    type: str
    arguments: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Schema:
    """Object types (name -> fields) and input object types (name -> field -> type)."""

    objects: dict[str, dict[str, FieldType]]
    inputs: dict[str, dict[str, str]]


def _tokens(document: str) -> list[Token]:
    found = []
    offset = 0
    while offset < len(document):
        match = _TOKEN.match(document, offset)
        line = document.count("\n", 0, offset) + 1
        at = Location(line, offset - (document.rfind("\n", 0, offset) + 1) + 1)
        if match is None:
            raise _parse_error(Token("UNKNOWN_CHAR", document[offset], at))
        kind = match.lastgroup or ""
        if kind != "ignored":
            found.append(Token(kind, match.group(), at))
        offset = match.end()
    return found


def _parse_error(token: Token | None) -> GraphQLError:
    if token is None:
        return GraphQLError({"message": "Unexpected end of document", "locations": []})
    kind = {"name": "IDENTIFIER", "string": "STRING", "block": "STRING"}.get(token.kind)
    if token.kind == "number":
        kind = "FLOAT" if re.search(r"[.eE]", token.text) else "INT"
    kind = kind or _PUNCTUATION.get(token.text, token.kind)
    return GraphQLError(
        {
            "message": f'Parse error on "{token.text}" ({kind}) at '
            f"[{token.at.line}, {token.at.column}]",
            "locations": [token.at.json()],
        }
    )


class _Parser:
    """A recursive-descent parser over one document's tokens."""

    def __init__(self, document: str) -> None:
        self.tokens = _tokens(document)
        self.position = 0

    def peek(self) -> Token | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, text: str | None = None, kind: str | None = None) -> Token:
        token = self.peek()
        if token is None or (text and token.text != text) or (kind and token.kind != kind):
            raise _parse_error(token)
        self.position += 1
        return token

    def skip(self, text: str) -> bool:
        token = self.peek()
        if token is not None and token.text == text and token.kind == "punct":
            self.position += 1
            return True
        return False

    def document(self) -> list[Operation]:
        operations = [self.operation()]
        while self.peek() is not None:
            operations.append(self.operation())
        return operations

    def operation(self) -> Operation:
        token = self.peek()
        if token is not None and token.text == "{":
            return Operation("query", None, {}, self.selection_set())
        kind = self.take(kind="name")
        if kind.text not in ROOTS:
            raise _parse_error(kind)
        named = self.peek()
        name = self.take().text if named is not None and named.kind == "name" else None
        variables = self.variable_definitions() if self.skip("(") else {}
        return Operation(kind.text, name, variables, self.selection_set())

    def variable_definitions(self) -> dict[str, VariableDefinition]:
        found = {}
        while not self.skip(")"):
            self.take("$")
            name = self.take(kind="name").text
            self.take(":")
            kind = self.type_reference()
            found[name] = VariableDefinition(kind, self.value() if self.skip("=") else None)
        return found

    def type_reference(self) -> str:
        if self.skip("["):
            inner = self.type_reference()
            self.take("]")
            written = f"[{inner}]"
        else:
            written = self.take(kind="name").text
        return written + "!" if self.skip("!") else written

    def selection_set(self) -> list[Field]:
        self.take("{")
        fields = [self.field()]
        while not self.skip("}"):
            fields.append(self.field())
        return fields

    def field(self) -> Field:
        first = self.take(kind="name")
        alias, name = (
            (first.text, self.take(kind="name").text) if self.skip(":") else (None, first.text)
        )
        arguments: dict[str, Value] = {}
        if self.skip("("):
            while not self.skip(")"):
                argument = self.take(kind="name").text
                self.take(":")
                arguments[argument] = self.value()
        token = self.peek()
        has_set = token is not None and token.text == "{" and token.kind == "punct"
        return Field(name, alias, arguments, self.selection_set() if has_set else [], first.at)

    def value(self) -> Value:
        token = self.take()
        if token.kind == "punct":
            return self.compound(token)
        if token.kind == "number":
            return float(token.text) if re.search(r"[.eE]", token.text) else int(token.text)
        if token.kind == "string":
            text: str = json.loads(token.text)
            return text
        if token.kind == "block":
            return token.text[3:-3].replace('\\"""', '"""')
        return {"true": True, "false": False, "null": None}.get(token.text, EnumValue(token.text))

    def compound(self, token: Token) -> Value:
        if token.text == "$":
            return Variable(self.take(kind="name").text)
        if token.text == "[":
            items = []
            while not self.skip("]"):
                items.append(self.value())
            return items
        if token.text != "{":
            raise _parse_error(token)
        fields: dict[str, Value] = {}
        while not self.skip("}"):
            name = self.take(kind="name").text
            self.take(":")
            fields[name] = self.value()
        return fields


def operation_of(body: object) -> tuple[Operation, Json]:
    """Parse a request body's document; return the operation to run and its variables."""
    if not isinstance(body, dict) or not isinstance(body.get("query"), str):
        raise GraphQLError({"message": "A query attribute must be specified and must be a string."})
    variables = body.get("variables") or {}
    if not isinstance(variables, dict):
        raise GraphQLError({"message": "Variables must be an object."})
    operations = _Parser(body["query"]).document()
    wanted = body.get("operationName")
    if wanted is None and len(operations) > 1:
        raise GraphQLError({"message": "An operation name is required"})
    chosen = [op for op in operations if wanted is None or op.name == wanted]
    if not chosen:
        raise GraphQLError({"message": f'No operation named "{wanted}"'})
    return chosen[0], variables


def validate(schema: Schema, operation: Operation) -> None:
    """Refuse an operation asking for what the schema does not have, every error at once."""
    errors: list[Json] = []
    root = ROOTS[operation.kind]
    _check_fields(schema, root, operation.selections, [operation.path_name], errors)
    if errors:
        raise GraphQLError(*errors)


def _check_fields(
    schema: Schema, type_name: str, fields: list[Field], path: list[str], errors: list[Json]
) -> None:
    for field in fields:
        here = [*path, field.key]
        if field.name == "__typename":
            continue
        found = schema.objects.get(type_name, {}).get(field.name)
        if found is None:
            errors.append(
                _error(
                    f"Field '{field.name}' doesn't exist on type '{type_name}'",
                    field,
                    here,
                    {"code": "undefinedField", "typeName": type_name, "fieldName": field.name},
                )
            )
            continue
        _check_arguments(field, found, here, errors)
        _check_selection(schema, field, found, here, errors)


def _check_arguments(field: Field, found: FieldType, path: list[str], errors: list[Json]) -> None:
    accepted = dict(found.arguments)
    for name in field.arguments:
        if name not in accepted:
            message = f"Field '{field.name}' doesn't accept argument '{name}'"
            errors.append(_error(message, field, path, {"code": "argumentNotAccepted"}))
    missing = [n for n, kind in found.arguments if kind.endswith("!") and n not in field.arguments]
    if missing:
        message = f"Field '{field.name}' is missing required arguments: {', '.join(missing)}"
        errors.append(_error(message, field, path, {"code": "missingRequiredArguments"}))


def _check_selection(
    schema: Schema, field: Field, found: FieldType, path: list[str], errors: list[Json]
) -> None:
    returned = found.type.removesuffix("!")
    is_object = returned in schema.objects
    if is_object and not field.selections:
        message = (
            f"Field must have selections (field '{field.name}' returns {found.type} but has no "
            f"selections. Did you mean '{field.name} {{ ... }}'?)"
        )
        errors.append(_error(message, field, path, {"code": "selectionMismatch"}))
    elif not is_object and field.selections:
        names = ", ".join(f.name for f in field.selections)
        message = (
            f"Selections can't be made on scalars (field '{field.name}' returns {found.type} "
            f"but has selections [{names}])"
        )
        errors.append(_error(message, field, path, {"code": "selectionMismatch"}))
    elif is_object:
        _check_fields(schema, returned, field.selections, path, errors)


def _error(message: str, field: Field, path: list[str], extensions: Json) -> Json:
    return {
        "path": path,
        "extensions": extensions,
        "locations": [field.at.json()],
        "message": message,
    }


def arguments_of(
    schema: Schema, type_name: str, field: Field, operation: Operation, variables: Json
) -> Json:
    """Coerce a validated field's arguments, its variables filled in, to their types."""
    found = schema.objects[type_name][field.name]
    coerced: Json = {}
    for name, kind in found.arguments:
        given = _fill(field.arguments.get(name), operation, variables)
        coerced[name] = _coerce(schema, given, kind, f"Argument '{name}' on Field '{field.name}'")
    return coerced


def _fill(value: Value, operation: Operation, variables: Json) -> Any:
    """Replace the variables in a value with what the request gave (or their defaults)."""
    if isinstance(value, Variable):
        declared = operation.variables.get(value.name)
        if declared is None:
            message = f"Variable ${value.name} is used by {operation.path_name} but not declared"
            raise GraphQLError({"message": message, "extensions": {"code": "variableNotDefined"}})
        given = variables.get(value.name, declared.default)
        if given is None and declared.type.endswith("!"):
            message = f"Variable ${value.name} of type {declared.type} was provided invalid value"
            raise GraphQLError({"message": message, "extensions": {"value": None}})
        return given
    if isinstance(value, list):
        return [_fill(item, operation, variables) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, operation, variables) for key, item in value.items()}
    return value.name if isinstance(value, EnumValue) else value


def _coerce(schema: Schema, value: Any, kind: str, what: str) -> Any:
    """Check a value against a type as written (`ID!`, an input object), GitHub's way."""
    named = kind.removesuffix("!")
    if value is None:
        if kind.endswith("!"):
            raise _invalid_value(what, value, kind)
        return None
    if named in schema.inputs:
        fields = schema.inputs[named]
        if not isinstance(value, dict) or set(value) - set(fields):
            raise _invalid_value(what, value, kind)
        return {
            name: _coerce(
                schema, value.get(name), written, f"Argument '{name}' on InputObject '{named}'"
            )
            for name, written in fields.items()
        }
    accepted = SCALARS.get(named, (str,))
    if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted):
        raise _invalid_value(what, value, kind)
    return str(value) if named == "ID" else value


def _invalid_value(what: str, value: Any, kind: str) -> GraphQLError:
    message = f"{what} has an invalid value ({json.dumps(value)}). Expected type '{kind}'."
    return GraphQLError(
        {"message": message, "extensions": {"code": "argumentLiteralsIncompatible"}}
    )


def select(fields: list[Field], value: Json) -> Json:
    """Keep of a resolved object what the selection set asks for, under its response keys."""
    picked: Json = {}
    for field in fields:
        found = value.get(field.name)
        if field.selections and isinstance(found, dict):
            found = select(field.selections, found)
        picked[field.key] = found
    return picked
