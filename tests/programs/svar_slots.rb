# Frames whose method entry is behind an svar (methods that use $~), in two classes whose methods
# share a name, called in turn under GC churn: a freed svar's slot goes to the next object, the other
# class's svar among them. Every real stack is known: Alpha#initialize only under Object#make_alpha,
# Beta#initialize only under Object#make_beta.
#   ruby svar_slots.rb [sdb]
require "sdb" if ARGV[0] == "sdb"
$stdout.sync = true

class Alpha
  def initialize(s)
    @m = s =~ /a(l+)pha/ ? $1 : nil      # $~: this frame's svar
    i = 0
    i += 1 while i < 300
  end
end

class Beta
  def initialize(s)
    @m = s =~ /b(e+)ta/ ? $1 : nil
    i = 0
    i += 1 while i < 300
  end
end

def make_alpha(s) = Alpha.new(s)
def make_beta(s) = Beta.new(s)

puts "ready"
junk = []
loop do
  make_alpha("xallpha")
  make_beta("ybeeta")
  junk << "x" * 10 << [1]                 # garbage: GCs, and freed slots taken again
  junk.clear if junk.size > 5_000
end
