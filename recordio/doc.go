// Package recordio reads and writes Mesos RecordIO streams and negotiates the
// media types of RecordIO over HTTP.
//
// # Format
//
// A stream is a sequence of records, each a decimal length, a line feed, and that many bytes:
//
//	records     = *record
//	record      = record-size LF record-data
//	record-size = 1*DIGIT          ; decimal ASCII, read as uint64
//	record-data = record-size(OCTET)
//
// There is no magic, checksum or compression field. "6\nhello!0\n1\n 13\n13 characters"
// holds "hello!", "", " " and "13 characters". Chunk boundaries of the underlying
// reader mean nothing: a header or a record may be split across any number of reads.
//
// # Decoding policy
//
// The Reader agrees with Apache Mesos (stout, the Python library) and mesos-go wherever
// they agree, and chooses as follows where they differ:
//
//   - ASCII spaces, tabs and a carriage return before or after the digits of a header are
//     tolerated (mesos-go trims them; stout's numify does not).
//   - Empty header lines, a bare LF or only such white space, are skipped, as the Mesos
//     reference algorithm does.
//   - A zero-length record is returned as an empty record (stout and the Python library);
//     mesos-go silently drops it.
//   - A header must be 1 to 20 decimal digits and fit in a uint64; a sign, hex ("0x10",
//     which stout would accept), any other byte, or overflow is ErrBadHeader.
//   - A header line, white space included, is at most MaxHeaderLine bytes, so garbage
//     without a line feed cannot make the reader buffer without bound.
//   - A record longer than the reader's maximum is ErrRecordTooLarge (mesos-go's
//     "oversized frame"), unless the reader was told to hand such records on as streams
//     (StreamLargerRecords), which keeps memory bounded for records of any size.
//   - End of input inside a header or a record is ErrTruncated ("frame underrun");
//     end of input at a record boundary, or after only white space and empty lines,
//     is io.EOF.
//   - Every error is fatal for the stream: the reader cannot know where the next header
//     starts, so every later call returns the same error. There is no resynchronisation.
//
// Every decoding error is an *Error carrying the byte offset of the header concerned and
// the index of the record it would have been; errors.Is matches the sentinel.
package recordio
