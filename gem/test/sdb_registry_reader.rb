# frozen_string_literal: true

# Reads /dev/shm/sdb-<pid> the way the sidecar does, from plain Ruby:
# File.binread + unpack at the offsets the header gives. Test use only.
module SdbRegistryReader
  HEADER = %w[magic version header_size slot_size slot_count slots_offset pid status gc_active
              proc_start_ticks created_mono_ns gen ruby_version ruby_description layout_name
              disabled_reason].freeze
  HEADER_FORMAT = "a8L8Q3Z32Z160Z16Z200"
  SLOT = %w[gen live native_tid serial thread_addr ec_addr start_mono_ns start_wall_ns state flags name].freeze
  SLOT_FORMAT = "QLLQQQQQLLZ64"
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
    slots = (0...header["slot_count"]).map do |i|
      raw = data.byteslice(header["slots_offset"] + i * header["slot_size"], header["slot_size"])
      SLOT.zip(raw.unpack(SLOT_FORMAT)).to_h.merge("index" => i)
    end
    header.merge("slots" => slots)
  end

  def live_slots(path)
    read(path)["slots"].select { |s| s["live"] == 1 }
  end
end
