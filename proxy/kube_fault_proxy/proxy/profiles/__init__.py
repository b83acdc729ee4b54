"""The FaultProfile model: schema, strict loading with positions, selectors, and the library of named profiles."""
