# frozen_string_literal: true

# Reads /dev/shm/sdb-<pid> the way the sidecar does, from plain Ruby:
# File.binread + unpack at the offsets the header gives. Test use only.
module SdbRegistryReader
  HEADER = %w[magic version header_size slot_size slot_count slots_offset pid status gc_active
              proc_start_ticks created_mono_ns gen ruby_version ruby_description layout_name
              disabled_reason].freeze
  HEADER_FORMAT = "a8L8Q3Z32Z160Z16Z200"
  SLOT = %w[gen live native_tid serial thread_addr ec_addr start_mono_ns start_wall_ns state flags name
            span span_ec].freeze
  SLOT_FORMAT = "QLLQQQQQLLZ64QQ"
  SPANS = %w[spans_offset span_count strings_offset strings_size span_head strings_used strings_refused].freeze
  SERVICE_SIZE = 128 # service_name ends struct sdb_header (version 4)
  SPANS_SIZE = 32 # the span fields come right before it: they start header_size - 160 bytes in
  SPAN = %w[seq span parent thread_serial at_ns what kind endpoint status request_id].freeze
  SPAN_FORMAT = "Q5L4a64"
  SPAN_SIZE = 128
  STATUS = { 0 => "STARTING", 1 => "ENABLED", 2 => "DISABLED" }.freeze
  LAYOUT_OFFSET = 472 # offsetof(struct sdb_header, layout)

  module_function

  def read(path)
    data = File.binread(path)
    header = HEADER.zip(data.unpack(HEADER_FORMAT)).to_h
    header["status_name"] = STATUS[header["status"]]
    header["thread_ec"] = data.byteslice(LAYOUT_OFFSET, 2).unpack1("S")
    # layout.cfp_sp and layout.body_local_table_size: the 63rd and 64th uint16 of struct sdb_layout
    header["link_fields"] = data.byteslice(LAYOUT_OFFSET + 2 * 62, 4).unpack("SS")
    header["file_size"] = data.bytesize
    spans_at = header["header_size"] - SERVICE_SIZE - SPANS_SIZE
    header.merge!(SPANS.zip(data.byteslice(spans_at, SPANS_SIZE).unpack("L4QL2")).to_h)
    header["service_name"] = data.byteslice(header["header_size"] - SERVICE_SIZE, SERVICE_SIZE).unpack1("Z*")
    slots = (0...header["slot_count"]).map do |i|
      raw = data.byteslice(header["slots_offset"] + i * header["slot_size"], header["slot_size"])
      SLOT.zip(raw.unpack(SLOT_FORMAT)).to_h.merge("index" => i)
    end
    header.merge("slots" => slots)
  end

  # The span events still in the ring, oldest first, with their endpoint names.
  def spans(path)
    h = read(path)
    data = File.binread(path)
    head = h["span_head"]
    first = [head - h["span_count"], 0].max
    (first...head).map do |i|
      raw = data.byteslice(h["spans_offset"] + (i % h["span_count"]) * SPAN_SIZE, SPAN_SIZE)
      ev = SPAN.zip(raw.unpack(SPAN_FORMAT)).to_h
      bytes = ev["request_id"]
      if ev["what"] == 1 # a begin's request_id bytes hold its trace context: trace id, span id
        trace, span = bytes.byteslice(0, 16), bytes.byteslice(16, 8)
        ev["trace_id"] = trace.unpack1("H*") if trace.bytes.any?(&:positive?)
        ev["span_id"] = span.unpack1("H*") if span.bytes.any?(&:positive?)
        ev["request_id"] = ""
      else
        ev["request_id"] = bytes.unpack1("Z*")
      end
      id = ev["endpoint"]
      if id.positive?
        len = data.byteslice(h["strings_offset"] + id - 1, 4).unpack1("L")
        ev["endpoint_name"] = data.byteslice(h["strings_offset"] + id - 1 + 4, len)
      end
      ev
    end
  end

  def live_slots(path)
    read(path)["slots"].select { |s| s["live"] == 1 }
  end
end
