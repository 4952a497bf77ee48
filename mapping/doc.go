// Package mapping compiles a configuration snapshot into immutable routing
// tables: record and request facts in, topic, key and properties out.
package mapping
